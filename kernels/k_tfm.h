/* Transformer kernels (GPT-2): LayerNorm, GELU, token + position embedding, causal
 * self-attention, the tied classifier with a fused, chunked softmax cross-entropy.
 * The conventions of kernels/k.h: float32, row-major, no allocation (scratch comes from
 * the caller's workspace or a few small tiles on the stack), backward overwrites its
 * outputs unless an `acc` argument says otherwise, and results are bitwise the same
 * for any thread count. Activations are [rows, channels] with rows = batch x time
 * (token-major, as llm.c and PyTorch's [B, T, C]). */
#ifndef K_TFM_H
#define K_TFM_H
#include <stddef.h>
#include <stdint.h>

/* LayerNorm over the last dimension c of x[n, c] (biased variance, PyTorch's):
 * y = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps); mean[n] and rstd[n] are
 * kept for backward. b may be NULL (no bias). */
void k_layernorm_fwd(int n, int c, const float *x, const float *w, const float *b, float eps,
                     float *y, float *mean, float *rstd);
/* dx (may be dy), dw and db (NULL: not wanted) from the kept mean and rstd. */
void k_layernorm_bwd(int n, int c, const float *x, const float *w, const float *mean,
                     const float *rstd, const float *dy, float *dx, float *dw, float *db);

/* Linear with the weight stored [in, out] (Hugging Face's Conv1D, GPT-2's layout):
 * y[n, out] = x[n, in] w[in, out] + b[out] (b may be NULL). Backward: dx, dw, db
 * (each NULL: not wanted); dx may not alias dy; the workspace (k_conv1d_hf_workspace
 * bytes) holds w transposed. */
void k_conv1d_hf_fwd(int n, int in, int out, const float *x, const float *w, const float *b, float *y);
size_t k_conv1d_hf_workspace(int in, int out);
void k_conv1d_hf_bwd(int n, int in, int out, const float *x, const float *w, const float *dy, float *dx, float *dw,
                     float *db, void *ws);
/* The same with bf16 operands and fp32 accumulation (--amp bf16; kernels/k.h's
 * k_linear_*_bf16 on w transposed into the workspace, dW transposed back). */
size_t k_conv1d_hf_bf16_workspace(int n, int in, int out);
void k_conv1d_hf_fwd_bf16(int n, int in, int out, const float *x, const float *w, const float *b, float *y, void *ws);
void k_conv1d_hf_bwd_bf16(int n, int in, int out, const float *x, const float *w, const float *dy, float *dx,
                          float *dw, float *db, void *ws);
/* t[cols, rows] = a[rows, cols] transposed (threads split the rows; no workspace). */
void k_transpose(int rows, int cols, const float *a, float *t);

/* GELU, tanh form (PyTorch's approximate="tanh", GPT-2's "gelu_new"):
 * y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Backward from x; dx may be dy.
 * The same bits on every ISA path. */
void k_gelu_fwd(size_t n, const float *x, float *y);
void k_gelu_bwd(size_t n, const float *x, const float *dy, float *dx);
/* SiLU (nn.SiLU): y = x sigmoid(x), as k_silu of kernels/k_math.h (the device's too);
 * backward from x; dx may be dy. The same bits on every ISA path. */
void k_silu_fwd(size_t n, const float *x, float *y);
void k_silu_bwd(size_t n, const float *x, const float *dy, float *dx);

/* Token + position embedding: y[b, t, :] = wte[ids[b*ld + t], :] + wpe[t, :] (ld: the
 * row stride of ids, len or more: a language-model window holds one token more).
 * Backward: dwpe[t] = sum over b of dy[b, t] (overwritten); dwte rows accumulate dy
 * in token order, added into dwte when acc (a classifier tied to wte wrote it first),
 * else over zeros. Ids outside [0, vocab) are a caller bug (the data reader checks). */
void k_tok_pos_embed_fwd(int b, int len, int c, const int32_t *ids, int ld, const float *wte,
                         const float *wpe, float *y);
void k_tok_pos_embed_bwd(int b, int len, int c, int vocab, const int32_t *ids, int ld, const float *dy,
                         float *dwte, float *dwpe, int acc);

/* Causal multi-head self-attention on the packed projection qkv[b, t, 3*h*hd] (q, k, v
 * side by side, head j at columns j*hd of each, as GPT-2's c_attn makes it):
 * y[b, t, h*hd] = softmax(q k^T / sqrt(hd) + causal mask) v, heads side by side.
 * Flash-attention style: key tiles stream through an online softmax, so only
 * lse[b, h, t] (the log-sum-exp of each score row) is kept, never the t x t scores;
 * backward recomputes the probabilities from lse. hd <= K_ATTN_MAX_HD. */
#define K_ATTN_MAX_HD 256
void k_attention_fwd(int b, int t, int h, int hd, const float *qkv, float *y, float *lse);
/* dqkv[b, t, 3*h*hd] from dy and the forward's y and lse (overwritten). */
void k_attention_bwd(int b, int t, int h, int hd, const float *qkv, const float *y,
                     const float *lse, const float *dy, float *dqkv);
/* --amp bf16's: the tiles' products (Q K^T, P V and backward's five) on bf16-rounded
 * operands with fp32 sums, on AMX tiles where the CPU has them (k_amx.h); elsewhere the
 * fp32 kernels above. Softmax, its running max and sums, and lse stay fp32. */
void k_attention_fwd_bf16(int b, int t, int h, int hd, const float *qkv, float *y, float *lse);
void k_attention_bwd_bf16(int b, int t, int h, int hd, const float *qkv, const float *y,
                          const float *lse, const float *dy, float *dqkv);
/* The stored version (the comparison point for time and memory): the probabilities
 * att[b, h, t, t] are kept by forward and read by backward (rows above the diagonal
 * are zero). The same maths; summation order differs. t <= K_ATTN_STORED_MAX_T. */
#define K_ATTN_STORED_MAX_T 4096
void k_attention_stored_fwd(int b, int t, int h, int hd, const float *qkv, float *y, float *att);
void k_attention_stored_bwd(int b, int t, int h, int hd, const float *qkv, const float *att,
                            const float *dy, float *dqkv);

/* Classifier tied to the embedding with softmax cross-entropy fused: logits = x w^T
 * (x[n, c], w[v, c]) are made a block of rows at a time into the workspace and never
 * exist for all n rows. Returns the sum over rows with a target in [0, v) of
 * logsumexp(logits) - logits[target] (others are ignored: no loss, zero gradient);
 * loss_rows[n] (may be NULL) gets each row's loss (0 for ignored rows).
 * k_classifier_fwd_bwd also writes dx = scale * (softmax - onehot) w and
 * dw (+)= scale * (softmax - onehot)^T x (added into dw when acc_dw); dx NULL and
 * dw NULL make it the forward alone. The workspace is k_classifier_workspace bytes,
 * for any n' <= n. */
size_t k_classifier_workspace(int n, int c, int v);
double k_classifier_fwd_bwd(int n, int c, int v, const float *x, const float *w,
                            const int32_t *targets, float scale, float *loss_rows, float *dx,
                            float *dw, int acc_dw, void *ws);
#endif
