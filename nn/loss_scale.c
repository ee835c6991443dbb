#include "nn/loss_scale.h"
#include <float.h>

int nn_scaler_update(nn_scaler *s, int finite)
{
    if (!finite) {
        s->scale *= 0.5; /* backoff_factor */
        if (s->scale < DBL_MIN) s->scale = DBL_MIN;
        s->good = 0;
        return 0;
    }
    if (++s->good == NN_SCALER_GROWTH_INTERVAL) {
        if (s->scale * 2.0 <= DBL_MAX) s->scale *= 2.0; /* growth_factor */
        s->good = 0;
    }
    return 1;
}
