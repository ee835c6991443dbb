/* Named-tensor files (safetensors) and saves of several such files that belong
 * together (a model's state_dict and its optimizer state). The layout is the standard
 * one (8-byte little-endian header length, JSON header padded with spaces to 8 bytes,
 * contiguous tensor data in header order): safetensors.torch.load_file reads it. Each
 * tensor's CRC-32 is in the metadata as "crc32.<name>", the header's own CRC-32 (taken
 * with this value written as "00000000") as "crc32.__header__": a flipped bit anywhere
 * in the header (a metadata value, a shape, an offset) is caught, not trusted.
 *
 * Save: temporary file, write, fsync, close, rotate older generations (keep > 1:
 * PATH.1 = the previous PATH, ... PATH.<keep-1>), rename over PATH, fsync the
 * directory. PATH is replaced by one rename, so at every instant it holds a complete
 * checkpoint: a failure at any step leaves the previous one in place and loadable.
 * Temporary files of an earlier save whose process died (PATH.tmp.PID, PID gone) are
 * removed by the next save.
 *
 * A save of several parts (BASE, BASE+suffix, ...) writes every part's temporary file
 * first, then renames parts 1.. (keeping each one's old file as BASE+suffix.prev), then
 * part 0, then drops the .prev files. Every part carries one save id ("stio.save_id", a
 * hash of all the parts' contents); stio_open_part takes the .prev when a save was
 * interrupted between the renames, so the files read always belong to one save.
 * Generations: BASE.k and BASE.k+suffix.
 *
 * Load: every header field is bounds-checked (a corrupt or truncated file is one line
 * naming the file and the byte offset); the caller says which tensors it expects with
 * which dtype and shape, and a difference is one line naming the tensor and both
 * shapes. Loading allocates (the header); saving allocates nothing. */
#ifndef NN_STIO_H
#define NN_STIO_H
#include <stddef.h>
#include <stdint.h>

enum { STIO_F32, STIO_F64, STIO_F16, STIO_BF16, STIO_I32, STIO_I64, STIO_U8, STIO_NDTYPE };
#define STIO_MAX_DIMS 8
#define STIO_MAX_NAME 128
#define STIO_MAX_HEADER (16u << 20)
#define STIO_MAX_TENSORS 1024
#define STIO_MAX_PARTS 4
#define STIO_HEADER_CRC "crc32.__header__"
#define STIO_SAVE_ID "stio.save_id"

typedef struct stio_tensor {
    const char *name;
    int dtype;                       /* STIO_* */
    int ndim;
    int64_t shape[STIO_MAX_DIMS];
    void *data;                      /* save: the bytes; load: where they go */
} stio_tensor;

typedef struct stio_meta { const char *key, *value; } stio_meta;

/* Writes the tensors (in this order) and metadata to path as described above; keep
 * >= 1 generations are kept. Keys "crc32.*" and "stio.*" are reserved. 0, or -1 with
 * one line in err naming the path and the step that failed. */
int stio_save(const char *path, const stio_tensor *t, int nt, const stio_meta *m, int nm, int keep, char *err,
              size_t errlen);
/* One file of a save of several: BASE + suffix (part 0's suffix is ignored: BASE). */
typedef struct stio_part {
    const char *suffix;
    const stio_tensor *t;
    int nt;
    const stio_meta *m;
    int nm;
} stio_part;
int stio_save_parts(const char *base, const stio_part *p, int np, int keep, char *err, size_t errlen);

typedef struct stio_file stio_file;
/* Opens and checks path (header, offsets, sizes); the data is read by stio_read. */
int stio_open(stio_file **out, const char *path, char *err, size_t errlen);
/* The same on bytes in memory (fuzzing, tests); buf must outlive the stio_file. */
int stio_open_mem(stio_file **out, const void *buf, size_t len, const char *name, char *err, size_t errlen);
void stio_close(stio_file *f);
/* Opens BASE+suffix of the save whose part 0 (BASE) is main: the file must carry main's
 * save id; when it does not and BASE+suffix.prev does (a save interrupted between its
 * renames), that one. -1 with one line naming both files otherwise. */
int stio_open_part(stio_file **out, const char *base, const char *suffix, const stio_file *main, char *err,
                   size_t errlen);
/* Metadata value of key, or NULL. */
const char *stio_meta_get(const stio_file *f, const char *key);
int stio_count(const stio_file *f);
/* Tensor i of the file (header order): its name, dtype, shape; data is NULL. */
int stio_info(const stio_file *f, int i, stio_tensor *out);
/* The byte offset in the file of tensor i's data (0: no such tensor). */
uint64_t stio_data_offset(const stio_file *f, int i);
/* Reads each wanted tensor into t[i].data after checking that the file has it with
 * t[i].dtype and t[i].shape and that its CRC matches. Tensors of the file that are
 * not wanted are skipped. 0, or -1 with one line in err. */
int stio_read(stio_file *f, const stio_tensor *t, int nt, char *err, size_t errlen);

extern const char *const stio_dtype_names[STIO_NDTYPE]; /* "F32", ... */
size_t stio_dtype_size(int dtype);

/* Fault injection for tests: fn is called before every step of a save (step names:
 * "open", "write", "fsync", "close", "unlink", "rotate", "link", "rename",
 * "fsync-dir"; index counts calls of that step within the save). A non-zero return
 * makes the step fail with that errno. NULL restores normal operation. */
typedef int (*stio_fault_fn)(const char *step, int index, void *ctx);
void stio_set_fault(stio_fault_fn fn, void *ctx);
#endif
