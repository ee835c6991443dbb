/* Test helpers for data files: small datasets (MNIST-format IDX, plain or gzip; text)
 * written into a temp dir, loaded; files and checkpoints compared. */
#ifndef T_DATA_H
#define T_DATA_H
#include "nn/data/dataset.h"
#include <stddef.h>
#include <stdint.h>

/* Makes a fresh directory under /tmp; returns its path (static storage). */
const char *t_tmpdir(const char *tag);
/* Writes raw bytes to dir/name (gzip-compressed when gz). */
void t_write_file(const char *dir, const char *name, const void *buf, size_t n, int gz);
/* In the first 4 KiB of file path, finds `find` and, skip bytes after its start,
 * writes the string `with` or, when with is NULL, XORs that byte with x (a damaged
 * header); t_fail when find is not there. */
void t_patch_file(const char *path, const char *find, long skip, const char *with, int x);
/* Writes the string text to dir/name; returns the file's path (static storage, rotated
 * among 4 calls). */
const char *t_write_text(const char *dir, const char *name, const char *text);
/* Writes a well-formed IDX images (3-D) or labels (1-D) file. */
void t_write_idx_images(const char *dir, const char *name, int n, int rows, int cols, const uint8_t *px, int gz);
void t_write_idx_labels(const char *dir, const char *name, int n, const uint8_t *labels, int gz);
/* A learnable synthetic dataset in Fashion-MNIST layout (train n_train, t10k n_test):
 * class c draws a bright bar at a class-specific position plus noise. */
void t_write_synthetic_dataset(const char *dir, int n_train, int n_test, int gz);
/* nn_data_open + nn_data_load of split into a (planned, then sized to the plan and
 * loaded): 0, or -1 with the error in err (a freed on every failure after the plan). */
int t_open_load(nn_dataset *d, rt_arena *a, const nn_data_cfg *cfg, const char *split, char *err, size_t n);
/* 1 when files a and b hold the same bytes. */
int t_same_file(const char *a, const char *b);
/* t_same_file of a and b, and of a.state and b.state (a checkpoint's optimizer state)
 * when a.state exists. */
int t_same_checkpoint(const char *a, const char *b);
/* The JSON header of safetensors file path (its first 64 KiB, the 8-byte length
 * blanked): a static buffer, "" when unreadable. */
const char *t_st_header(const char *path);
/* A keyword task for textcnn in dir: train.tsv (256 lines) and test.tsv (64),
 * "pos|neg<TAB>seven words", one of them a label word at a varying place. */
void t_write_text_dataset(const char *dir);
/* Token shards in DIR/data (returned; static): ntrain windows of 16 (+1) tokens of a
 * repeating pattern (learnable) as lm_train.bin, its first nval tokens as lm_val.bin. */
const char *t_lm_data(const char *dir, int ntrain, int nval);
#endif
