/* --amp fp16's loss scaler (nn/loss_scale.h) against GradScaler's rules: init 2^16,
 * halved (and the step skipped) on inf/NaN, doubled after 2000 clean steps in a row,
 * the count restarting at every change. */
#include "test/t.h"
#include "nn/loss_scale.h"

TEST(loss_scaler_follows_gradscaler)
{
    nn_scaler s = {65536.0, 0};
    for (int i = 0; i < 1999; i++) CHECK(nn_scaler_update(&s, 1) == 1);
    CHECK(s.scale == 65536.0 && s.good == 1999);
    CHECK(nn_scaler_update(&s, 1) == 1); /* the 2000th clean step */
    CHECK(s.scale == 131072.0 && s.good == 0);
    for (int i = 0; i < 1500; i++) nn_scaler_update(&s, 1);
    CHECK(nn_scaler_update(&s, 0) == 0); /* skipped, halved, the count restarts */
    CHECK(s.scale == 65536.0 && s.good == 0);
    for (int i = 0; i < 1999; i++) nn_scaler_update(&s, 1);
    CHECK(s.scale == 65536.0);
    CHECK(nn_scaler_update(&s, 0) == 0 && nn_scaler_update(&s, 0) == 0);
    CHECK(s.scale == 16384.0 && s.good == 0);
    /* a scale that reaches the bottom stays positive */
    nn_scaler z = {1e-300, 0};
    for (int i = 0; i < 100; i++) nn_scaler_update(&z, 0);
    CHECK(z.scale > 0);
}
