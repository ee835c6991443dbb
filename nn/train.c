#include "nn/train.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

double nn_peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

/* Carves every buffer from `a`: run once on a planning arena, once on the real one. */
static int carve(nn_trainer *t, rt_arena *a, char *err, size_t errlen)
{
    const nn_opts *o = &t->o;
    if (nn_dataset_load(&t->train, a, err, errlen) || nn_dataset_load(&t->test, a, err, errlen))
        return -1;
    nn_sampler_init(&t->sampler, a, t->train.n, t->world, t->rank, 1, o->drop_last, (uint64_t)o->seed);
    int max_batch = o->batch_size > t->eval_chunk ? o->batch_size : t->eval_chunk;
    nn_loader_plan(&t->loader, a, max_batch, t->train.rows * t->train.cols);
    if (nn_model_build(&t->model, o->model, a, max_batch)) {
        snprintf(err, errlen, "--model %s: unknown model (available: lenet)", o->model);
        return -1;
    }
    t->momentum = rt_arena_alloc(a, t->model.nparams * sizeof(float), RT_MEM_OPTIM, "momentum");
    return 0;
}

int nn_trainer_setup(nn_trainer *t, const nn_opts *o, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->o = *o;
    t->rank = 0;
    t->world = 1;
    if (o->device && !strcmp(o->device, "cuda")) {
        snprintf(err, errlen, "--device cuda: this build has no CUDA port (nvcc was not found at build time); use --device cpu");
        return -1;
    }
    if (nn_data_locate(o->data, t->data_dir, sizeof t->data_dir, err, errlen)) return -1;
    if (nn_dataset_open(&t->train, t->data_dir, "train", err, errlen) ||
        nn_dataset_open(&t->test, t->data_dir, "t10k", err, errlen))
        return -1;
    if (t->train.rows != 28 || t->train.cols != 28 || t->test.rows != 28 || t->test.cols != 28) {
        snprintf(err, errlen, "%s: images are %dx%d, LeNet needs 28x28", t->train.images_path,
                 t->train.rows, t->train.cols);
        return -1;
    }
    /* Evaluation in chunks no larger than the training batch: same sums, and the
     * activations planned for training suffice (--test-batch-size 1000 would
     * otherwise need 4x the activation memory of the whole training step). */
    t->eval_chunk = o->test_batch_size < o->batch_size ? o->test_batch_size : o->batch_size;

    rt_arena plan;
    rt_arena_plan(&plan, "host");
    if (carve(t, &plan, err, errlen)) return -1;
    if (o->mem_report) rt_arena_report(&plan);
    if (rt_arena_init(&t->host, "host", plan.high)) {
        snprintf(err, errlen, "cannot allocate the host arena of %zu bytes", plan.high);
        return -1;
    }
    nn_dataset tr = t->train, te = t->test;
    t->train = tr;
    t->test = te;
    if (carve(t, &t->host, err, errlen)) return -1;

    nn_model_init(&t->model, (uint64_t)o->seed);
    memset(t->model.grads, 0, t->model.nparams * sizeof(float));
    memset(t->momentum, 0, t->model.nparams * sizeof(float));
    t->sgd = (k_sgd_cfg){.lr = (float)o->lr, .momentum = (float)o->momentum,
                         .weight_decay = (float)o->weight_decay, .nesterov = o->nesterov};
    nn_loader_start_thread(&t->loader);
    return 0;
}

double nn_trainer_step(nn_trainer *t, const float *x, const int32_t *y, int n)
{
    nn_model *m = &t->model;
    const float *lp = nn_model_forward(m, x, n, 1, (uint64_t)t->o.seed * 1000003u + (uint64_t)t->rank, t->step);
    double loss = k_nll_loss_sum(n, 10, lp, y, NULL) / n;
    nn_model_backward(m, x, y, n, n);
    k_sgd_step(m->nparams, &t->sgd, t->step == 0, m->params, m->grads, t->momentum);
    t->step++;
    return loss;
}

void nn_trainer_eval(nn_trainer *t, double *loss_sum, long *correct, long *count)
{
    const float *x;
    const int32_t *y;
    int n;
    *loss_sum = 0;
    *correct = 0;
    *count = 0;
    nn_loader_begin(&t->loader, &t->test, NULL, 0, t->test.n, t->eval_chunk);
    while ((n = nn_loader_next(&t->loader, &x, &y)) > 0) {
        const float *lp = nn_model_forward(&t->model, x, n, 0, 0, 0);
        long c = 0;
        *loss_sum += k_nll_loss_sum(n, 10, lp, y, &c);
        *correct += c;
        *count += n;
    }
}

static double train_epoch(nn_trainer *t, int epoch)
{
    const nn_opts *o = &t->o;
    const float *x;
    const int32_t *y;
    int n, batch_idx = 0;
    int nbatches = (t->sampler.num_samples + o->batch_size - 1) / o->batch_size;
    nn_sampler_set_epoch(&t->sampler, epoch);
    nn_loader_begin(&t->loader, &t->train, t->sampler.indices, 0, t->sampler.num_samples, o->batch_size);
    double t0 = port_now_s();
    while ((n = nn_loader_next(&t->loader, &x, &y)) > 0) {
        if (o->max_steps && t->step >= (uint64_t)o->max_steps) break;
        double loss = nn_trainer_step(t, x, y, n);
        if (batch_idx % o->log_interval == 0 && t->rank == 0)
            printf("Train Epoch: %d [%d/%d (%.0f%%)]\tLoss: %.6f\n", epoch, batch_idx * n, t->train.n,
                   100.0 * batch_idx / nbatches, loss);
        batch_idx++;
    }
    /* Drain the pass so the loader is idle before evaluation reuses it. */
    while (nn_loader_next(&t->loader, &x, &y) > 0) {}
    return port_now_s() - t0;
}

int nn_trainer_run(nn_trainer *t)
{
    const nn_opts *o = &t->o;
    double total = 0;
    for (int epoch = 1; epoch <= o->epochs; epoch++) {
        double dt = train_epoch(t, epoch);
        total += dt;
        if (t->rank == 0) printf("Epoch %d of %d took %.3fs\n", epoch, o->epochs, dt);
        double loss;
        long correct, count;
        nn_trainer_eval(t, &loss, &correct, &count);
        if (t->rank == 0)
            printf("\nTest set: Average loss: %.4f, Accuracy: %ld/%ld (%.0f%%)\n\n", loss / count, correct,
                   count, 100.0 * correct / count);
        fflush(stdout);
        if (o->max_steps && t->step >= (uint64_t)o->max_steps) break;
    }
    t->peak_rss_mib = nn_peak_rss_mib();
    if (t->rank == 0) {
        printf("Total time= %.3fs\n", total);
        if (o->mem_report)
            printf("memory: planned %.2f MiB in the host arena, peak RSS %.2f MiB\n",
                   t->host.high / 1048576.0, t->peak_rss_mib);
    }
    return 0;
}

void nn_trainer_free(nn_trainer *t)
{
    nn_loader_stop(&t->loader);
    rt_arena_free(&t->host);
}
