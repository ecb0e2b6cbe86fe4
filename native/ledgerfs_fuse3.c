/*
 * ledgerfs' own libfuse3 binding (high-level path API), as a plain N-API addon.
 * See native/README.md for the design; src/fuse/native-binding.ts is its only user.
 *
 * Threads: libfuse's worker threads (fuse_loop_mt on a thread of ours) turn each request into a
 * `struct req` on their own stack, append it to the mount's queue, wake the JS thread through one
 * uv_async handle and sleep on a semaphore. The JS thread drains the whole queue per wake-up
 * (several requests per wake-up when they pile up), calls one JS handler per request with a
 * numeric request id, and JS answers later with reply(id, code, payload). The reply fills
 * libfuse's output (stat, statvfs, directory filler, buffers) on the JS thread while the worker
 * still sleeps, then posts the semaphore. No per-request JS closures, timers or references except
 * the read/write Buffer, which views libfuse's own memory and is detached at reply time.
 */
#define FUSE_USE_VERSION 312
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <fuse.h>
#include <node_api.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <uv.h>

#define ADDON_NAME "ledgerfs_fuse3"
#include "ledgerfs_common.h"

enum op {
  OP_GETATTR, OP_FGETATTR, OP_ACCESS, OP_STATFS, OP_READDIR, OP_READLINK,
  OP_OPEN, OP_CREATE, OP_READ, OP_WRITE, OP_FLUSH, OP_FSYNC, OP_RELEASE,
  OP_TRUNCATE, OP_FTRUNCATE, OP_MKDIR, OP_RMDIR, OP_UNLINK, OP_RENAME,
  OP_SYMLINK, OP_LINK, OP_CHMOD, OP_CHOWN, OP_UTIMENS,
  OP_GETXATTR, OP_SETXATTR, OP_LISTXATTR, OP_REMOVEXATTR,
  OP_FALLOCATE, OP_COPY_FILE_RANGE, OP_LSEEK,
  OP_COUNT
};
/* the handler gets this op when the session loop has ended (unmounted) */
#define OP_CLOSED (-1)

struct req {
  struct req *next;
  int op;
  const char *path, *path2;
  double a, b, c, d;
  char *buf;          /* read/write data, readlink/getxattr/listxattr output, setxattr value */
  size_t size;
  struct dirh *dir;   /* readdir: the listing goes here */
  int plus;           /* readdir: FUSE_READDIR_PLUS asked */
  struct stat *st;
  struct statvfs *sv;
  uint64_t *fh_out;   /* open/create */
  uint32_t uid, gid, pid;
  int result;
  napi_ref bufref;    /* the Buffer over `buf` (read/write), detached at reply time */
  sem_t done;
};

/*
 * A directory handle holds one listing, taken from JS when the kernel reads from offset 0, and
 * serves every later offset from it. Entries go to libfuse with their own offsets (i + 1): that
 * is the only mode in which libfuse 3.14 passes readdirplus attributes on to the kernel (its
 * offset-0 buffering sends plus entries without a node id, and the kernel then looks each up).
 */
struct dirh {
  char *path;
  int listed, plus;
  uint32_t n;
  char **names;          /* pointers into `block` */
  char *block;
  struct stat *st;       /* n, when plus */
  unsigned char *has;    /* n: st[i] is valid */
};

static void dirh_clear(struct dirh *d) {
  free(d->block);
  free(d->names);
  free(d->st);
  free(d->has);
  d->names = NULL; d->block = NULL; d->st = NULL; d->has = NULL;
  d->n = 0; d->listed = 0; d->plus = 0;
}

struct mnt {
  napi_env env;
  struct js_target js;
  uv_async_t async;
  pthread_mutex_t lock;
  struct req *head, *tail;
  int loop_done, closed_reported, destroyed, thread_started;
  struct fuse *fuse;
  pthread_t thread;
  struct mount_limits lim;
  int loop_result;
  /* JS-thread counters: requests dispatched, wake-ups that found requests, the largest batch */
  uint64_t requests, batches, max_batch;
};

/* ---- request ids: slots owned by the JS thread ------------------------------------------- */
/* id = gen * 65536 + index; a stale or repeated reply finds a different generation. */
#define SLOT_BITS 16
#define MAX_SLOTS (1u << SLOT_BITS)
static struct req **slots;
static uint32_t *gens;
static uint32_t nslots, *freelist, nfree;

static int slot_alloc(struct req *r, double *id) {
  uint32_t i;
  if (nfree) {
    i = freelist[--nfree];
  } else {
    if (nslots >= MAX_SLOTS) return -1;
    uint32_t n = nslots ? nslots * 2 : 64;
    if (n > MAX_SLOTS) n = MAX_SLOTS;
    struct req **s = realloc(slots, n * sizeof *s);
    if (!s) return -1;
    slots = s;
    uint32_t *g = realloc(gens, n * sizeof *g);
    if (!g) return -1;
    gens = g;
    uint32_t *f = realloc(freelist, n * sizeof *f);
    if (!f) return -1;
    freelist = f;
    for (uint32_t k = nslots; k < n; k++) { slots[k] = NULL; gens[k] = 0; }
    for (uint32_t k = n; k > nslots + 1; k--) freelist[nfree++] = k - 1;
    i = nslots;
    nslots = n;
  }
  gens[i] = (gens[i] + 1) & 0x3fffffff;
  slots[i] = r;
  *id = (double)gens[i] * MAX_SLOTS + i;
  return 0;
}

static struct req *slot_take(double id) {
  if (!(id >= 0)) return NULL;
  uint64_t v = (uint64_t)id;
  uint32_t i = v & (MAX_SLOTS - 1), g = (uint32_t)(v >> SLOT_BITS);
  if (i >= nslots || !slots[i] || gens[i] != g) return NULL;
  struct req *r = slots[i];
  slots[i] = NULL;
  freelist[nfree++] = i;
  return r;
}

/* Attribute scratch shared with JS: 16 doubles, then 3 int64 ns times (see native-binding.ts). */
static double *scratch_f;
static int64_t *scratch_t;
static napi_ref scratch_ref;

/* ---- libfuse side (worker threads) ------------------------------------------------------- */

static int submit(struct req *r) {
  struct fuse_context *ctx = fuse_get_context();
  struct mnt *m = ctx->private_data;
  r->uid = ctx->uid;
  r->gid = ctx->gid;
  r->pid = ctx->pid;
  r->next = NULL;
  r->result = -EIO;
  sem_init(&r->done, 0, 0);
  pthread_mutex_lock(&m->lock);
  if (m->tail) m->tail->next = r; else m->head = r;
  m->tail = r;
  pthread_mutex_unlock(&m->lock);
  uv_async_send(&m->async);
  while (sem_wait(&r->done) != 0 && errno == EINTR) {}
  sem_destroy(&r->done);
  return r->result;
}

#define REQ(o) struct req r; memset(&r, 0, sizeof r); r.op = (o)

static int lf_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
  REQ(fi ? OP_FGETATTR : OP_GETATTR);
  r.path = path; r.st = st;
  if (fi) r.a = (double)fi->fh;
  return submit(&r);
}
static int lf_access(const char *path, int mask) {
  REQ(OP_ACCESS); r.path = path; r.a = mask; return submit(&r);
}
static int lf_statfs(const char *path, struct statvfs *sv) {
  REQ(OP_STATFS); r.path = path; r.sv = sv; return submit(&r);
}
/* With nullpath_ok libfuse hands readdir no path; the core lists by path, so the directory
 * handle carries it (a copy made here, without a trip to JS). */
static int lf_opendir(const char *path, struct fuse_file_info *fi) {
  struct dirh *d = calloc(1, sizeof *d);
  if (!d) return -ENOMEM;
  d->path = strdup(path ? path : "/");
  if (!d->path) { free(d); return -ENOMEM; }
  fi->fh = (uint64_t)(uintptr_t)d;
  return 0;
}
static int lf_releasedir(const char *path, struct fuse_file_info *fi) {
  (void)path;
  struct dirh *d = (struct dirh *)(uintptr_t)fi->fh;
  if (d) { dirh_clear(d); free(d->path); free(d); }
  return 0;
}
static int lf_readdir(const char *path, void *buf, fuse_fill_dir_t filler, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
  struct dirh *d = fi ? (struct dirh *)(uintptr_t)fi->fh : NULL;
  if (!d) return -EBADF;
  int plus = (flags & FUSE_READDIR_PLUS) != 0;
  if (off == 0 || !d->listed || (plus && !d->plus)) {
    dirh_clear(d);
    REQ(OP_READDIR); r.path = path ? path : d->path; r.dir = d; r.plus = plus;
    int rc = submit(&r);
    if (rc < 0) return rc;
  }
  for (uint32_t i = (uint32_t)(off < 0 ? 0 : off); i < d->n; i++) {
    int with = plus && d->plus && d->has[i];
    if (filler(buf, d->names[i], with ? &d->st[i] : NULL, (off_t)i + 1, with ? FUSE_FILL_DIR_PLUS : 0)) break;
  }
  return 0;
}
static int lf_readlink(const char *path, char *buf, size_t size) {
  REQ(OP_READLINK); r.path = path; r.buf = buf; r.size = size; return submit(&r);
}
static int lf_open(const char *path, struct fuse_file_info *fi) {
  REQ(OP_OPEN); r.path = path; r.a = fi->flags; r.fh_out = &fi->fh; return submit(&r);
}
static int lf_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
  REQ(OP_CREATE); r.path = path; r.a = mode; r.b = fi->flags; r.fh_out = &fi->fh; return submit(&r);
}
static int lf_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  REQ(OP_READ); r.path = path; r.a = (double)fi->fh; r.b = (double)size; r.c = (double)off;
  r.buf = buf; r.size = size;
  return submit(&r);
}
static int lf_write(const char *path, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  REQ(OP_WRITE); r.path = path; r.a = (double)fi->fh; r.b = (double)size; r.c = (double)off;
  r.buf = (char *)buf; r.size = size;
  return submit(&r);
}
static int lf_flush(const char *path, struct fuse_file_info *fi) {
  REQ(OP_FLUSH); r.path = path; r.a = (double)fi->fh; return submit(&r);
}
static int lf_release(const char *path, struct fuse_file_info *fi) {
  REQ(OP_RELEASE); r.path = path; r.a = (double)fi->fh; return submit(&r);
}
static int lf_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
  REQ(OP_FSYNC); r.path = path; r.a = (double)fi->fh; r.b = datasync; return submit(&r);
}
static int lf_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
  REQ(fi ? OP_FTRUNCATE : OP_TRUNCATE); r.path = path; r.b = (double)size;
  if (fi) r.a = (double)fi->fh;
  return submit(&r);
}
static int lf_mkdir(const char *path, mode_t mode) {
  REQ(OP_MKDIR); r.path = path; r.a = mode; return submit(&r);
}
static int lf_rmdir(const char *path) { REQ(OP_RMDIR); r.path = path; return submit(&r); }
static int lf_unlink(const char *path) { REQ(OP_UNLINK); r.path = path; return submit(&r); }
static int lf_rename(const char *from, const char *to, unsigned int flags) {
  REQ(OP_RENAME); r.path = from; r.path2 = to; r.a = flags; return submit(&r);
}
static int lf_symlink(const char *target, const char *path) {
  REQ(OP_SYMLINK); r.path = target; r.path2 = path; return submit(&r);
}
static int lf_link(const char *from, const char *to) {
  REQ(OP_LINK); r.path = from; r.path2 = to; return submit(&r);
}
/* With nullpath_ok, path is NULL only for a file unlinked while open under hard_remove, which
 * we do not use; the core has no fchmod/fchown/futimens, so such a request answers ENOENT. */
static int lf_chmod(const char *path, mode_t mode, struct fuse_file_info *fi) {
  (void)fi;
  if (!path) return -ENOENT;
  REQ(OP_CHMOD); r.path = path; r.a = mode; return submit(&r);
}
static int lf_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi) {
  (void)fi;
  if (!path) return -ENOENT;
  REQ(OP_CHOWN); r.path = path; r.a = uid; r.b = gid; return submit(&r);
}
static int lf_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi) {
  (void)fi;
  if (!path) return -ENOENT;
  REQ(OP_UTIMENS); r.path = path;
  r.a = (double)tv[0].tv_sec; r.b = (double)tv[0].tv_nsec;
  r.c = (double)tv[1].tv_sec; r.d = (double)tv[1].tv_nsec;
  return submit(&r);
}
static int lf_getxattr(const char *path, const char *name, char *value, size_t size) {
  REQ(OP_GETXATTR); r.path = path; r.path2 = name; r.buf = value; r.size = size; return submit(&r);
}
static int lf_setxattr(const char *path, const char *name, const char *value, size_t size, int flags) {
  REQ(OP_SETXATTR); r.path = path; r.path2 = name; r.buf = (char *)value; r.size = size; r.a = flags;
  return submit(&r);
}
static int lf_listxattr(const char *path, char *list, size_t size) {
  REQ(OP_LISTXATTR); r.path = path; r.buf = list; r.size = size; return submit(&r);
}
static int lf_removexattr(const char *path, const char *name) {
  REQ(OP_REMOVEXATTR); r.path = path; r.path2 = name; return submit(&r);
}
/* a: fh, b: offset, c: length, d: mode */
static int lf_fallocate(const char *path, int mode, off_t off, off_t len, struct fuse_file_info *fi) {
  if (!fi) return -EBADF;
  REQ(OP_FALLOCATE); r.path = path; r.a = (double)fi->fh; r.b = (double)off; r.c = (double)len; r.d = mode;
  return submit(&r);
}
/* a/b: source fh and offset, c/d: destination fh and offset, size: length (JS gets it as
 * `extra`). The kernel refuses flags itself (copy_file_range(2) has none yet). */
static ssize_t lf_copy_file_range(const char *path_in, struct fuse_file_info *fi_in, off_t off_in, const char *path_out,
                                  struct fuse_file_info *fi_out, off_t off_out, size_t len, int flags) {
  if (flags) return -EINVAL;
  if (!fi_in || !fi_out) return -EBADF;
  REQ(OP_COPY_FILE_RANGE); r.path = path_out; r.path2 = path_in;
  r.a = (double)fi_in->fh; r.b = (double)off_in; r.c = (double)fi_out->fh; r.d = (double)off_out; r.size = len;
  return submit(&r);
}
/* a: fh, b: offset, c: whence; the answer (an offset, maybe past 2^31) comes back in d */
static off_t lf_lseek(const char *path, off_t off, int whence, struct fuse_file_info *fi) {
  if (!fi) return -EBADF;
  REQ(OP_LSEEK); r.path = path; r.a = (double)fi->fh; r.b = (double)off; r.c = whence;
  int rc = submit(&r);
  return rc < 0 ? rc : (off_t)r.d;
}

static void *lf_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
  struct mnt *m = fuse_get_context()->private_data;
  /* st_ino from the backend (hard links share it), not libfuse's node ids */
  cfg->use_ino = 1;
  /* ops on an open file do not need its path (read/write/flush/release work from fh) */
  cfg->nullpath_ok = 1;
  /* unlinked-while-open files become .fuse_hidden*: the core aliases them (vfs/open-files.ts) */
  cfg->hard_remove = 0;
  cfg->entry_timeout = m->lim.entry_timeout;
  cfg->attr_timeout = m->lim.attr_timeout;
  cfg->negative_timeout = m->lim.negative_timeout;
  if (m->lim.max_write && m->lim.max_write < conn->max_write) conn->max_write = m->lim.max_write;
  /* must equal the max_read mount option (libfuse refuses the session otherwise) */
  conn->max_read = m->lim.max_write;
  /* The kernel clears setuid/setgid on write and chown itself, as on a local disk: the core
   * does not implement FUSE's killpriv contract. */
  conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
#ifdef FUSE_CAP_HANDLE_KILLPRIV_V2
  conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV_V2;
#endif
  /* The core keeps the kernel page cache out of the consistency story (writes go through). */
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  return m;
}

/* No getlk/setlk/flock on purpose: libfuse then leaves POSIX and flock locks to the kernel,
 * local to this mount (README, "Semantics and limits"). */
static struct fuse_operations lf_ops = {
  .getattr = lf_getattr, .readlink = lf_readlink, .mkdir = lf_mkdir, .unlink = lf_unlink,
  .rmdir = lf_rmdir, .symlink = lf_symlink, .rename = lf_rename, .link = lf_link,
  .chmod = lf_chmod, .chown = lf_chown, .truncate = lf_truncate, .open = lf_open,
  .read = lf_read, .write = lf_write, .statfs = lf_statfs, .flush = lf_flush,
  .release = lf_release, .fsync = lf_fsync, .readdir = lf_readdir, .init = lf_init,
  .opendir = lf_opendir, .releasedir = lf_releasedir,
  .access = lf_access, .create = lf_create, .utimens = lf_utimens,
  .fallocate = lf_fallocate, .copy_file_range = lf_copy_file_range, .lseek = lf_lseek,
};

static void *loop_thread(void *arg) {
  struct mnt *m = arg;
  /* signals belong to Node's main thread */
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  struct fuse_loop_config *cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 0);
  fuse_loop_cfg_set_idle_threads(cfg, 8);
  fuse_loop_cfg_set_max_threads(cfg, 64);
  m->loop_result = fuse_loop_mt(m->fuse, cfg);
  fuse_loop_cfg_destroy(cfg);
  pthread_mutex_lock(&m->lock);
  m->loop_done = 1;
  pthread_mutex_unlock(&m->lock);
  uv_async_send(&m->async);
  return NULL;
}

/* ---- JS side ------------------------------------------------------------------------------ */

static void fill_stat(struct stat *st) {
  fill_stat_from(st, scratch_f, scratch_t);
}

/* a JS string into a stack/heap buffer; returns its length, -1 if not a string */
static ssize_t utf8(napi_env env, napi_value v, char *buf, size_t cap) {
  size_t len = 0;
  if (napi_get_value_string_utf8(env, v, buf, cap, &len) != napi_ok) return -1;
  return (ssize_t)len;
}

/* Readdirplus records (native-binding.ts): per entry 12 x 8 bytes, the 9 doubles then the 3
 * int64 times of fill_stat_from; mode 0 = no attributes for this entry. */
#define PLUS_RECORD 96

static int reply_readdir(napi_env env, struct req *r, napi_value list, napi_value attrs) {
  bool is_array = false;
  if (napi_is_array(env, list, &is_array) != napi_ok || !is_array) return -EIO;
  uint32_t n = 0;
  napi_get_array_length(env, list, &n);
  char *rec = NULL;
  size_t rec_len = 0;
  if (r->plus && attrs) {
    bool is_ab = false;
    napi_is_arraybuffer(env, attrs, &is_ab);
    if (is_ab && napi_get_arraybuffer_info(env, attrs, (void **)&rec, &rec_len) != napi_ok) rec = NULL;
  }
  /* names into one block: lengths first */
  size_t total = 0;
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    size_t len = 0;
    if (napi_get_element(env, list, i, &v) != napi_ok || napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) return -EIO;
    total += len + 1;
  }
  struct dirh *d = r->dir;
  d->names = malloc((n ? n : 1) * sizeof *d->names);
  d->block = malloc(total ? total : 1);
  if (rec) {
    d->st = malloc((n ? n : 1) * sizeof *d->st);
    d->has = calloc(n ? n : 1, 1);
  }
  if (!d->names || !d->block || (rec && (!d->st || !d->has))) { dirh_clear(d); return -ENOMEM; }
  size_t at = 0;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    size_t len = 0;
    napi_get_element(env, list, i, &v);
    napi_get_value_string_utf8(env, v, d->block + at, total - at, &len);
    if (len > 255) { continue; } /* longer than NAME_MAX: no kernel could use it */
    d->names[kept] = d->block + at;
    const double *f = rec && (size_t)(i + 1) * PLUS_RECORD <= rec_len ? (const double *)(rec + (size_t)i * PLUS_RECORD) : NULL;
    if (d->has) {
      d->has[kept] = f && f[0] != 0;
      if (d->has[kept]) fill_stat_from(&d->st[kept], f, (const int64_t *)(f + 9));
    }
    at += len + 1;
    kept++;
  }
  d->n = kept;
  d->plus = rec != NULL;
  d->listed = 1;
  return 0;
}

static int reply_bytes(napi_env env, struct req *r, napi_value v) {
  void *data = NULL;
  size_t len = 0;
  bool isbuf = false;
  napi_is_buffer(env, v, &isbuf);
  if (!isbuf || napi_get_buffer_info(env, v, &data, &len) != napi_ok) return -EIO;
  if (r->size == 0) return (int)len;
  if (len > r->size) return -ERANGE;
  memcpy(r->buf, data, len);
  return (int)len;
}

static int reply_names(napi_env env, struct req *r, napi_value list) {
  bool is_array = false;
  if (napi_is_array(env, list, &is_array) != napi_ok || !is_array) return -EIO;
  uint32_t n = 0;
  napi_get_array_length(env, list, &n);
  size_t total = 0;
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    size_t len = 0;
    if (napi_get_element(env, list, i, &v) != napi_ok ||
        napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) return -EIO;
    if (r->size) {
      if (total + len + 1 > r->size) return -ERANGE;
      napi_get_value_string_utf8(env, v, r->buf + total, len + 1, &len);
    }
    total += len + 1;
  }
  return (int)total;
}

static void release_buffer(napi_env env, struct req *r) {
  /* libfuse frees or reuses this memory once answered: JS must not see it any more */
  detach_buffer(env, &r->bufref);
}

/* reply(id, code, payload?, attrs?) -> true if the request was still waiting */
static napi_value js_reply(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4], result;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  double id = -1, code = -EIO;
  napi_get_value_double(env, argv[0], &id);
  if (napi_get_value_double(env, argv[1], &code) != napi_ok) code = -EIO;
  struct req *r = slot_take(id);
  if (!r) {
    napi_get_boolean(env, false, &result);
    return result;
  }
  /* an LSEEK offset may pass INT_MAX: its reply reads `code` itself */
  int rc = code > INT_MAX ? INT_MAX : (int)code;
  if (rc >= 0) {
    switch (r->op) {
      case OP_GETATTR: case OP_FGETATTR: fill_stat(r->st); rc = 0; break;
      case OP_STATFS: fill_statvfs_from(r->sv, scratch_f); rc = 0; break;
      case OP_READDIR: rc = argc > 2 ? reply_readdir(env, r, argv[2], argc > 3 ? argv[3] : NULL) : -EIO; break;
      case OP_READLINK: {
        if (argc < 3 || r->size == 0) { rc = -EIO; break; }
        ssize_t n = utf8(env, argv[2], r->buf, r->size); /* truncates and terminates, like readlink */
        rc = n < 0 ? -EIO : 0;
        break;
      }
      case OP_OPEN: case OP_CREATE: *r->fh_out = (uint64_t)code; rc = 0; break;
      case OP_GETXATTR: rc = argc > 2 ? reply_bytes(env, r, argv[2]) : -EIO; break;
      case OP_LISTXATTR: rc = argc > 2 ? reply_names(env, r, argv[2]) : -EIO; break;
      case OP_READ: case OP_WRITE: if ((size_t)rc > r->size) rc = -EIO; break;
      case OP_COPY_FILE_RANGE: if ((size_t)rc > r->size) rc = -EIO; break;
      case OP_LSEEK: r->d = code; rc = 0; break;
      default: rc = 0;
    }
  }
  release_buffer(env, r);
  r->result = rc;
  sem_post(&r->done);
  napi_get_boolean(env, true, &result);
  return result;
}

static void dispatch(napi_env env, struct req *r, napi_value fn, napi_value recv) {
  double id;
  if (slot_alloc(r, &id) != 0) {
    r->result = -EAGAIN;
    sem_post(&r->done);
    return;
  }
  napi_value argv[12];
  napi_value null;
  napi_get_null(env, &null);
  napi_create_double(env, id, &argv[0]);
  napi_create_int32(env, r->op, &argv[1]);
  napi_create_uint32(env, r->uid, &argv[2]);
  napi_create_uint32(env, r->gid, &argv[3]);
  napi_create_uint32(env, r->pid, &argv[4]);
  if (r->path) napi_create_string_utf8(env, r->path, NAPI_AUTO_LENGTH, &argv[5]); else argv[5] = null;
  if (r->path2) napi_create_string_utf8(env, r->path2, NAPI_AUTO_LENGTH, &argv[6]); else argv[6] = null;
  napi_create_double(env, r->a, &argv[7]);
  napi_create_double(env, r->b, &argv[8]);
  napi_create_double(env, r->c, &argv[9]);
  napi_create_double(env, r->d, &argv[10]);
  argv[11] = null;
  if (r->op == OP_READ || r->op == OP_WRITE) {
    /* a view of libfuse's buffer: no copy either way; detached at reply */
    if (napi_create_external_buffer(env, r->size, r->size ? r->buf : (char *)"", NULL, NULL, &argv[11]) == napi_ok) {
      napi_create_reference(env, argv[11], 1, &r->bufref);
    } else {
      argv[11] = null;
    }
  } else if (r->op == OP_SETXATTR) {
    void *copy;
    napi_create_buffer_copy(env, r->size, r->buf, &copy, &argv[11]);
  } else if (r->op == OP_READDIR) {
    napi_get_boolean(env, r->plus, &argv[11]);
  } else if (r->op == OP_COPY_FILE_RANGE) {
    napi_create_double(env, (double)r->size, &argv[11]);
  }
  napi_value ret;
  napi_status s = napi_call_function(env, recv, fn, 12, argv, &ret);
  if (s != napi_ok) {
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (pending) {
      napi_value err;
      napi_get_and_clear_last_exception(env, &err);
      /* answer first, then let the exception surface as an uncaught one */
      if (slot_take(id)) { release_buffer(env, r); r->result = -EIO; sem_post(&r->done); }
      napi_fatal_exception(env, err);
    } else if (slot_take(id)) {
      release_buffer(env, r);
      r->result = -EIO;
      sem_post(&r->done);
    }
  }
}

static void on_async(uv_async_t *h) {
  struct mnt *m = h->data;
  napi_env env = m->env;
  pthread_mutex_lock(&m->lock);
  struct req *list = m->head;
  m->head = m->tail = NULL;
  int done = m->loop_done;
  pthread_mutex_unlock(&m->lock);
  if (!list && (!done || m->closed_reported)) return;

  napi_handle_scope hs;
  napi_open_handle_scope(env, &hs);
  napi_value fn, recv, resource;
  napi_get_reference_value(env, m->js.handler, &fn);
  napi_get_reference_value(env, m->js.resource, &resource);
  napi_get_undefined(env, &recv);
  /* one callback scope per batch: promise jobs and nextTicks run once, after all of it */
  napi_callback_scope cs;
  napi_open_callback_scope(env, resource, m->js.actx, &cs);
  uint64_t batch = 0;
  while (list) {
    struct req *next = list->next; /* list may be answered (and gone) during dispatch */
    batch++;
    napi_handle_scope inner;
    napi_open_handle_scope(env, &inner);
    dispatch(env, list, fn, recv);
    napi_close_handle_scope(env, inner);
    list = next;
  }
  if (batch) {
    m->requests += batch;
    m->batches++;
    if (batch > m->max_batch) m->max_batch = batch;
  }
  if (done && !m->closed_reported) {
    m->closed_reported = 1;
    call_closed(env, recv, fn, OP_CLOSED);
  }
  napi_close_callback_scope(env, cs);
  napi_close_handle_scope(env, hs);
}

static void mnt_free(struct mnt *m) {
  pthread_mutex_destroy(&m->lock);
  free(m);
}

static void on_closed_handle(uv_handle_t *h) {
  mnt_free(h->data);
}


/* mount(mountpoint, handler, options, xattrs) -> handle */
static napi_value js_mount(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 4) { napi_throw_type_error(env, NULL, "mount(mountpoint, handler, options, xattrs)"); return NULL; }
  char mountpoint[4096];
  size_t len;
  CHECK(napi_get_value_string_utf8(env, argv[0], mountpoint, sizeof mountpoint, &len));
  bool xattrs = false;
  napi_get_value_bool(env, argv[3], &xattrs);

  struct mount_limits lim;
  if (!mount_limits_init(env, argv[2], &lim)) return NULL;
  struct mnt *m = calloc(1, sizeof *m);
  if (!m) { napi_throw_error(env, NULL, "out of memory"); return NULL; }
  m->env = env;
  m->lim = lim;
  pthread_mutex_init(&m->lock, NULL);
  struct mount_args ma;
  mount_args_init(env, argv[2], m->lim.max_write, &ma);
  struct fuse_args args = FUSE_ARGS_INIT(ma.argc, ma.argv);

  struct fuse_operations ops = lf_ops;
  if (xattrs) {
    ops.getxattr = lf_getxattr; ops.setxattr = lf_setxattr;
    ops.listxattr = lf_listxattr; ops.removexattr = lf_removexattr;
  }
  m->fuse = fuse_new(&args, &ops, sizeof ops, m);
  fuse_opt_free_args(&args);
  if (!m->fuse) { mnt_free(m); napi_throw_error(env, NULL, "fuse_new failed (bad options? see stderr)"); return NULL; }
  if (fuse_mount(m->fuse, mountpoint) != 0) {
    fuse_destroy(m->fuse);
    mnt_free(m);
    napi_throw_error(env, NULL, "fuse_mount failed (see stderr)");
    return NULL;
  }
  js_target_init(env, &m->js, "ledgerfs:fuse3", argv[1]);
  uv_loop_t *loop;
  napi_get_uv_event_loop(env, &loop);
  uv_async_init(loop, &m->async, on_async);
  m->async.data = m;
  if (pthread_create(&m->thread, NULL, loop_thread, m) != 0) {
    fuse_unmount(m->fuse);
    fuse_destroy(m->fuse);
    m->destroyed = 1;
    uv_close((uv_handle_t *)&m->async, on_closed_handle);
    napi_throw_error(env, NULL, "pthread_create failed");
    return NULL;
  }
  m->thread_started = 1;
  return mount_handle(env, m);
}

static struct mnt *arg_mnt(napi_env env, napi_callback_info info) { return arg_external(env, info); }

/* destroy(handle): after the loop ended (handler got OP_CLOSED): join, free, release the loop */
static napi_value js_destroy(napi_env env, napi_callback_info info) {
  struct mnt *m = arg_mnt(env, info);
  if (!m || m->destroyed) return NULL;
  if (!m->loop_done) { napi_throw_error(env, NULL, "destroy() before the session loop ended"); return NULL; }
  m->destroyed = 1;
  pthread_join(m->thread, NULL);
  /* how well requests batch per wake-up (LEDGERFS_NATIVE_STATS=1) */
  if (getenv("LEDGERFS_NATIVE_STATS")) {
    fprintf(stderr, "ledgerfs_fuse3: %llu requests in %llu JS wake-ups (%.2f per wake-up, largest batch %llu)\n",
            (unsigned long long)m->requests, (unsigned long long)m->batches,
            m->batches ? (double)m->requests / (double)m->batches : 0.0, (unsigned long long)m->max_batch);
  }
  /* after an unmount from outside the kernel side is gone and this only closes the fd */
  fuse_unmount(m->fuse);
  fuse_destroy(m->fuse);
  js_target_free(env, &m->js);
  uv_close((uv_handle_t *)&m->async, on_closed_handle);
  return NULL;
}

/* unref(handle): a busy mount is being detached lazily; its loop may outlive the daemon's
 * other work, and must not keep the process alive (exit ends the connection). */
static napi_value js_unref(napi_env env, napi_callback_info info) {
  struct mnt *m = arg_mnt(env, info);
  if (m && !m->destroyed) uv_unref((uv_handle_t *)&m->async);
  return NULL;
}

/* setScratch(arrayBuffer): 16 doubles then 3 int64 (attribute/statfs replies) */
static napi_value js_set_scratch(napi_env env, napi_callback_info info) {
  char *data = keep_scratch(env, info, 16 * 8 + 3 * 8, &scratch_ref, "setScratch");
  if (data) {
    scratch_f = (double *)data;
    scratch_t = (int64_t *)(data + 16 * 8);
  }
  return NULL;
}

static napi_value init(napi_env env, napi_value exports) {
  return define_exports(env, exports, js_mount, js_destroy, js_reply, js_unref, js_set_scratch);
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
