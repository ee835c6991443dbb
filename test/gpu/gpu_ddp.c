/* DDP through the device path on one device: 2 ranks (loopback threads), each with
 * its own nn_cuda whose device graph nn_ddp hooks: buckets go out as
 * tp_iallreduce_device (pinned staging), run by the comm's thread. Small buckets, so
 * there are many and they go out while backward runs (every one from the hook). Rank 1 starts with wrong BatchNorm statistics: the device
 * broadcast_buffers must replace them with rank 0's before the forward. Reference:
 * the CPU executor on each rank's batch, the two gradients averaged, then SGD. */
#include "nn/ddp.h"
#include "nn/graph_cuda.h"
#include "ports/cuda/port_cuda.h"
#include "test/gpu/gpu_models.h"
#include "test/tp_harness.h"
#include <math.h>

#define B 3
static const nn_shape in = {3, 8, 8, 0};
static const k_sgd_cfg sgd = {.lr = 0.05f, .momentum = 0.9f};

typedef struct ddp_case {
    gm_model ref[2];          /* CPU, one per rank's batch */
    float *x[2];
    int32_t *y[2];
    float *params[2], *grads[2]; /* after the step, downloaded */
    unsigned char *bufs[2];
    int nbuckets[2], from_hook[2], fail[2];
    char msg[2][512];
} ddp_case;

static void rank_main(tp_comm *c, void *arg)
{
    ddp_case *k = arg;
    int r = tp_rank(c);
    nn_ddp *d = nn_ddp_wrap(c);
    gm_model host;
    char err[400] = "";
    nn_cuda *cu = NULL;
    if (!d || gm_build(&host, "resnet20", in, 10, 0, B) || !(cu = nn_cuda_open(0, err, sizeof err)) ||
        nn_cuda_setup(cu, &host.g, nn_ddp_cuda_stage_bytes(d), 0, err, sizeof err) ||
        nn_ddp_use_cuda(d, cu, RT_F32, err, sizeof err)) {
        snprintf(k->msg[r], sizeof k->msg[r], "setup: %s", err);
        k->fail[r] = 1;
        return;
    }
    nn_ddp_attach(d, &host.g, 0.004); /* ~4 KiB buckets: dozens of them */
    if (r == 1) /* running_mean of every BN: not rank 0's */
        for (int i = 0; i < host.g.nb; i++)
            if (host.g.b[i].dtype == RT_F32) ((float *)nn_buf_data(&host.g, i))[0] = 123.0f;
    if (nn_cuda_upload(cu, host.mom)) {
        snprintf(k->msg[r], sizeof k->msg[r], "upload: %s", port_cuda_errmsg());
        k->fail[r] = 1;
        return;
    }
    (void)nn_cuda_step(cu, k->x[r], k->y[r], B, &sgd, 1000 + r, 0, 0);
    nn_ddp_stats ds = nn_ddp_get_stats(d);
    k->nbuckets[r] = ds.nbuckets;
    k->from_hook[r] = ds.last_from_hook;
    k->grads[r] = gm_down(nn_cuda_graph(cu)->grads, host.g.nparams * sizeof(float));
    if (nn_cuda_download(cu, NULL)) k->fail[r] = 1;
    k->params[r] = malloc(host.g.nparams * sizeof(float));
    k->bufs[r] = malloc(host.g.buf_bytes);
    memcpy(k->params[r], host.g.params, host.g.nparams * sizeof(float));
    memcpy(k->bufs[r], host.g.bufs, host.g.buf_bytes);
    nn_ddp_use_cuda(d, NULL, RT_F32, NULL, 0);
    nn_cuda_close(cu);
    nn_ddp_close(d, 0);
    gm_drop(&host);
}

int gm_graph_ddp(int *cases)
{
    ddp_case k;
    memset(&k, 0, sizeof k);
    (*cases)++;
    for (int r = 0; r < 2; r++) {
        k.x[r] = malloc(B * nn_shape_numel(in) * sizeof(float));
        k.y[r] = malloc(B * sizeof(int32_t));
        gm_fill(k.x[r], k.y[r], B, in, 10, 0, 50 + r);
        if (gm_build(&k.ref[r], "resnet20", in, 10, 0, B)) return 1;
        nn_graph *g = &k.ref[r].g;
        nn_forward(g, k.x[r], B, 1, 1000 + r, 0);
        (void)nn_loss(g, k.y[r], B, NULL); /* the log-probabilities backward starts from */
        nn_backward(g, k.y[r], B, B);
    }
    /* The averaged gradient, and SGD on rank 0's reference copy. */
    nn_graph *g0 = &k.ref[0].g;
    for (size_t i = 0; i < g0->nparams; i++) g0->grads[i] = (g0->grads[i] + k.ref[1].g.grads[i]) * 0.5f;
    k_sgd_step(g0->nparams, &sgd, 1, g0->params, g0->grads, k.ref[0].mom);
    tpt_world w;
    if (tpt_open(&w, 2, NULL)) return 1;
    tpt_run(&w, rank_main, &k);
    tpt_close(&w);
    int bad = 0;
    for (int r = 0; r < 2 && !bad; r++) {
        if (k.fail[r] || !k.params[r]) {
            printf("FAIL ddp rank %d: %s\n", r, k.msg[r]);
            bad = 1;
            break;
        }
        char name[32];
        snprintf(name, sizeof name, "ddp rank %d", r);
        bad |= gm_cmp_params(name, "averaged gradient", g0, g0->grads, k.grads[r], 1e-4);
        bad |= gm_cmp_params(name, "parameter after the averaged step", g0, g0->params, k.params[r], 1e-4);
        bad |= gm_cmp_bufs(name, &k.ref[r].g, k.bufs[r]); /* rank 0's statistics, then its own batch's */
    }
    if (!bad && memcmp(k.params[0], k.params[1], g0->nparams * sizeof(float))) {
        printf("FAIL ddp: the ranks' parameters differ after the step\n");
        bad = 1;
    }
    if (!bad && k.nbuckets[0] < 8) {
        printf("FAIL ddp: %d buckets (the test wants many)\n", k.nbuckets[0]);
        bad = 1;
    }
    /* Every bucket left from the backward hook (the last one when conv1's gradient was
     * final), none from after backward. */
    for (int r = 0; r < 2 && !bad; r++)
        if (k.from_hook[r] != k.nbuckets[r]) {
            printf("FAIL ddp rank %d: %d of %d buckets went out during backward\n", r, k.from_hook[r], k.nbuckets[r]);
            bad = 1;
        }
    for (int r = 0; r < 2; r++) {
        free(k.x[r]); free(k.y[r]); free(k.params[r]); free(k.grads[r]); free(k.bufs[r]);
        gm_drop(&k.ref[r]);
    }
    return bad;
}
