/*
 * ledgerfs' libfuse3 binding over the LOW-LEVEL API, driven entirely from Node's JS thread.
 * See native/README.md ("native-ll"); src/fuse/native-ll-binding.ts is its only user.
 *
 * No threads: the session fd is non-blocking and watched by a uv_poll in Node's loop. The poll
 * callback reads and processes the queued requests (fuse_session_receive_buf/process_buf until
 * EAGAIN, or one when requests come one at a time: see SINGLES) inside one N-API callback scope,
 * so promise jobs run once per batch; after the last answer a check handle busy-polls the fd
 * for a while (see SPIN). Each ll callback calls the JS handler synchronously
 * with a numeric request id; JS answers then or later with reply(id, code, payload), which
 * sends the fuse_reply_* at once. Node ids (lookup counts, forget, paths) live in JS (src/fuse/node-table.ts): this file never maps an inode to a path.
 * No per-request closures or timers; read/write data reaches JS as a Buffer over our own memory
 * (the receive buffer of a WRITE, a pooled buffer for a READ), detached when answered.
 */
#define FUSE_USE_VERSION 312
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <poll.h>
#include <sched.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define ADDON_NAME "ledgerfs_fuse3_ll"
#include "ledgerfs_common.h"
#include "ledgerfs_names.h"

/*
 * The op codes, once: the enum and the names the addon exports as `opNames`. The TypeScript side
 * (`const enum Op` and OP_NAMES in src/fuse/native-ll-binding.ts) is checked against `opNames`
 * when the addon loads, so the two tables cannot drift unnoticed. Add an op at the end.
 */
#define LEDGERFS_OPS(X)                                                                          \
  X(LOOKUP) X(FORGET) X(BATCH_FORGET) X(GETATTR) X(SETATTR) X(READLINK) X(MKDIR) X(UNLINK)      \
  X(RMDIR) X(SYMLINK) X(RENAME) X(LINK) X(OPEN) X(READ) X(WRITE) X(FLUSH) X(RELEASE) X(FSYNC)   \
  X(OPENDIR) X(READDIR) X(RELEASEDIR) X(STATFS) X(SETXATTR) X(GETXATTR) X(LISTXATTR)            \
  X(REMOVEXATTR) X(ACCESS) X(CREATE) X(FALLOCATE) X(COPY_FILE_RANGE) X(LSEEK) X(MKNOD)
#define OP_ENUM(name) OP_##name,
#define OP_NAME(name) #name,
enum op { LEDGERFS_OPS(OP_ENUM) OP_COUNT };
static const char *const op_names[] = { LEDGERFS_OPS(OP_NAME) };
/* the handler gets this op when the session has ended (unmounted, by us or from outside) */
#define OP_CLOSED (-1)
#define UNKNOWN_INO 0xffffffffu
/* a READ or WRITE this big is not followed by a busy-poll (see SPIN) */
#define SPIN_BULK_BYTES (64 * 1024)
#define POOL_MAX 8

struct mnt {
  napi_env env;
  struct js_target js;
  uv_poll_t poll;
  struct fuse_session *se;
  struct fuse_buf fbuf;     /* the receive buffer (libfuse allocates its size) */
  int stolen;               /* the request just processed kept fbuf.mem (WRITE data in JS) */
  int closed, closed_reported, destroyed;
  napi_value fn, recv;      /* valid inside on_poll only */
  struct mount_limits lim;
  char *recv_pool[POOL_MAX]; int n_recv;  /* spare receive buffers, libfuse's size */
  char *read_pool[POOL_MAX]; int n_read;  /* spare READ reply buffers, max_write bytes */
  uint64_t requests, batches, max_batch;
  uint32_t singles;         /* consecutive draining wake-ups that found exactly one request */
  uint32_t wakeups;
  uint32_t inflight;        /* requests handed to JS and not answered yet */
  /* the busy-poll after replies (see SPIN) */
  uv_check_t spin;
  uint64_t spin_ns;         /* the window; 0: never spin */
  uint64_t idle_since;      /* when the last answer left nothing in flight; 0: none since the last wake-up */
  int spin_on;              /* the last request came within the window of the answer before it */
  int bulk;                 /* the last request moved SPIN_BULK_BYTES or more (no spin after it) */
  int closing_handles;      /* uv handles still to close before the struct is freed */
  uint64_t spin_hits, spin_misses, spin_requests;
  uint64_t spin_contended;  /* spins given up because another task held our CPU (see SPIN) */
  uint64_t spin_quiet_at;   /* no spin before this time: the CPU was contended lately (see SPIN) */
  uint64_t spin_backoff_ns; /* the next contended yield's pause; doubles while yields stay long (see SPIN) */
  /* the raw request stream (see KILLPRIV) */
  uint64_t init_unique;     /* the INIT request's id, until its answer went out */
  uint32_t init_flags;      /* what the kernel offered in INIT */
  uint32_t kill_suidgid;    /* the request being processed asks to clear setuid/setgid */
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- request ids: slots owned by the JS thread ------------------------------------------ */
/* id = gen * 65536 + index; a stale or repeated reply finds a different generation. */
#define SLOT_BITS 16
#define MAX_SLOTS (1u << SLOT_BITS)
enum pool { POOL_NONE, POOL_RECV, POOL_READ };
struct slot {
  fuse_req_t req;           /* NULL: free */
  struct mnt *m;
  int op;
  uint32_t gen;
  size_t size;              /* READ/READDIR/GETXATTR/LISTXATTR: what the kernel can take */
  off_t off;                /* READDIR: the entry index to start at */
  int plus;                 /* READDIR: readdirplus */
  char *mem;                /* READ reply buffer or WRITE receive buffer, pooled at reply */
  int pool;
  napi_ref bufref;          /* the Buffer JS got over `mem` */
};
static struct slot *slots;
static uint32_t nslots, *freelist, nfree;

static int slot_alloc(uint32_t *out) {
  if (!nfree) {
    if (nslots >= MAX_SLOTS) return -1;
    uint32_t n = nslots ? nslots * 2 : 64;
    if (n > MAX_SLOTS) n = MAX_SLOTS;
    struct slot *s = realloc(slots, n * sizeof *s);
    if (!s) return -1;
    slots = s;
    uint32_t *f = realloc(freelist, n * sizeof *f);
    if (!f) return -1;
    freelist = f;
    memset(slots + nslots, 0, (n - nslots) * sizeof *slots);
    for (uint32_t k = n; k > nslots; k--) freelist[nfree++] = k - 1;
    nslots = n;
  }
  *out = freelist[--nfree];
  return 0;
}
static double slot_id(uint32_t i) { return (double)slots[i].gen * MAX_SLOTS + i; }
static int slot_find(double id, uint32_t *out) {
  if (!(id >= 0)) return -1;
  uint64_t v = (uint64_t)id;
  uint32_t i = v & (MAX_SLOTS - 1), g = (uint32_t)(v >> SLOT_BITS);
  if (i >= nslots || !slots[i].req || slots[i].gen != g) return -1;
  *out = i;
  return 0;
}
static void slot_free(uint32_t i) {
  struct slot *s = &slots[i];
  /* the last answer out: the busy-poll window starts (see SPIN) */
  if (s->m && --s->m->inflight == 0) s->m->idle_since = now_ns();
  uint32_t gen = (s->gen + 1) & 0x3fffffff;
  memset(s, 0, sizeof *s);
  s->gen = gen;
  freelist[nfree++] = i;
}

/* Attribute scratch shared with JS (native-ll-binding.ts): one 128-byte record (9 doubles, the
 * 3 times' int64 seconds, nodeid, generation as doubles, then the 3 times' int32 nanoseconds at
 * byte NSEC_AT) used for entry/attr/statfs replies and setattr input; from byte 256,
 * FORGET_CHUNK (nodeid, nlookup) pairs of doubles for BATCH_FORGET. */
#define RECORD 128
#define NSEC_AT 112
#define FORGET_AT 256
#define FORGET_CHUNK 512
static char *scratch;
static napi_ref scratch_ref;

/* ---- buffers ------------------------------------------------------------------------------ */

static void pool_put(struct mnt *m, int pool, char *mem) {
  if (!mem) return;
  if (!m->destroyed && pool == POOL_RECV && m->n_recv < POOL_MAX) m->recv_pool[m->n_recv++] = mem;
  else if (!m->destroyed && pool == POOL_READ && m->n_read < POOL_MAX) m->read_pool[m->n_read++] = mem;
  else free(mem);
}

/* JS must not see memory that goes back to a pool or to libfuse: detach its Buffer. */
static void slot_release_mem(napi_env env, struct slot *s) {
  detach_buffer(env, &s->bufref);
  pool_put(s->m, s->pool, s->mem);
  s->mem = NULL;
}

/* ---- records ------------------------------------------------------------------------------ */

static void fill_stat_rec(struct stat *st, const char *rec) {
  fill_stat_from(st, (const double *)rec, (const int64_t *)rec + 9, (const int32_t *)(rec + NSEC_AT));
}

/* nodeid 0 = a negative entry (cached for the negative timeout) */
static void fill_entry(struct mnt *m, struct fuse_entry_param *e, const char *rec) {
  const double *f = (const double *)rec;
  memset(e, 0, sizeof *e);
  e->ino = (fuse_ino_t)f[12];
  e->generation = (uint64_t)f[13];
  if (e->ino) {
    fill_stat_rec(&e->attr, rec);
    e->attr_timeout = m->lim.attr_timeout;
    e->entry_timeout = m->lim.entry_timeout;
  } else {
    e->entry_timeout = m->lim.negative_timeout;
  }
}

static void put_time(char *rec, int i, const struct timespec *ts) {
  ((int64_t *)rec)[9 + i] = (int64_t)ts->tv_sec;
  ((int32_t *)(rec + NSEC_AT))[i] = (int32_t)ts->tv_nsec;
}

/* ---- calls into JS ------------------------------------------------------------------------ */

static struct mnt *req_mnt(fuse_req_t req) { return fuse_req_userdata(req); }

/*
 * Hand one request to JS: handler(id, op, uid, gid, pid, ino, a, b, c, name, name2, extra).
 * `i` is the request's slot (or UINT32_MAX for forgets, which need no answer).
 */
static void call_js(struct mnt *m, uint32_t i, int op, fuse_req_t req, double ino, double a, double b, double c,
                    const char *name, const char *name2, napi_value extra) {
  napi_env env = m->env;
  const struct fuse_ctx *ctx = fuse_req_ctx(req);
  napi_value argv[12], null;
  napi_get_null(env, &null);
  double id = i == UINT32_MAX ? -1 : slot_id(i);
  napi_create_double(env, id, &argv[0]);
  napi_create_int32(env, op, &argv[1]);
  napi_create_uint32(env, ctx->uid, &argv[2]);
  napi_create_uint32(env, ctx->gid, &argv[3]);
  napi_create_uint32(env, ctx->pid, &argv[4]);
  napi_create_double(env, ino, &argv[5]);
  napi_create_double(env, a, &argv[6]);
  napi_create_double(env, b, &argv[7]);
  napi_create_double(env, c, &argv[8]);
  /* names (and a symlink's target) are bytes: see ledgerfs_names.h */
  if (name) name_to_js_z(env, name, &argv[9]); else argv[9] = null;
  if (name2) name_to_js_z(env, name2, &argv[10]); else argv[10] = null;
  argv[11] = extra ? extra : null;
  napi_value ret;
  if (napi_call_function(env, m->recv, m->fn, 12, argv, &ret) == napi_ok) return;
  /* the handler threw: answer EIO if it did not, then let the exception surface as uncaught */
  uint32_t k;
  if (i != UINT32_MAX && slot_find(id, &k) == 0) {
    slot_release_mem(env, &slots[k]);
    fuse_reply_err(slots[k].req, EIO);
    slot_free(k);
  }
  rethrow_pending(env);
}

/* a slot for `req`; on failure the request is answered (EAGAIN) and UINT32_MAX returned */
static uint32_t begin(fuse_req_t req, int op) {
  uint32_t i;
  if (slot_alloc(&i) != 0) {
    fuse_reply_err(req, EAGAIN);
    return UINT32_MAX;
  }
  slots[i].req = req;
  slots[i].m = req_mnt(req);
  slots[i].op = op;
  slots[i].m->inflight++;
  slots[i].m->bulk = 0;
  return i;
}

#define START(o) struct mnt *m = req_mnt(req); uint32_t i = begin(req, (o)); if (i == UINT32_MAX) return

static void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
  START(OP_LOOKUP);
  call_js(m, i, OP_LOOKUP, req, (double)parent, 0, 0, 0, name, NULL, NULL);
}
static void ll_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  call_js(req_mnt(req), UINT32_MAX, OP_FORGET, req, (double)ino, (double)nlookup, 0, 0, NULL, NULL, NULL);
  fuse_reply_none(req);
}
static void ll_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets) {
  double *pairs = (double *)(scratch + FORGET_AT);
  for (size_t at = 0; at < count; at += FORGET_CHUNK) {
    size_t n = count - at < FORGET_CHUNK ? count - at : FORGET_CHUNK;
    for (size_t k = 0; k < n; k++) {
      pairs[2 * k] = (double)forgets[at + k].ino;
      pairs[2 * k + 1] = (double)forgets[at + k].nlookup;
    }
    call_js(req_mnt(req), UINT32_MAX, OP_BATCH_FORGET, req, 0, (double)n, 0, 0, NULL, NULL, NULL);
  }
  fuse_reply_none(req);
}
static void ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  START(OP_GETATTR);
  call_js(m, i, OP_GETATTR, req, (double)ino, fi ? (double)fi->fh : -1, 0, 0, NULL, NULL, NULL);
}
/* the new values go through the scratch record (mode uid gid size, atime mtime) */
static void ll_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi) {
  START(OP_SETATTR);
  double *f = (double *)scratch;
  f[0] = attr->st_mode; f[1] = attr->st_uid; f[2] = attr->st_gid; f[3] = (double)attr->st_size;
  put_time(scratch, 0, &attr->st_atim);
  put_time(scratch, 1, &attr->st_mtim);
  call_js(m, i, OP_SETATTR, req, (double)ino, to_set, fi ? (double)fi->fh : -1, 0, NULL, NULL, NULL);
}
static void ll_readlink(fuse_req_t req, fuse_ino_t ino) {
  START(OP_READLINK);
  call_js(m, i, OP_READLINK, req, (double)ino, 0, 0, 0, NULL, NULL, NULL);
}
static void ll_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
  START(OP_MKDIR);
  call_js(m, i, OP_MKDIR, req, (double)parent, mode, 0, 0, name, NULL, NULL);
}
static void ll_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
  START(OP_MKNOD);
  call_js(m, i, OP_MKNOD, req, (double)parent, mode, (double)rdev, 0, name, NULL, NULL);
}
static void ll_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
  START(OP_UNLINK);
  call_js(m, i, OP_UNLINK, req, (double)parent, 0, 0, 0, name, NULL, NULL);
}
static void ll_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
  START(OP_RMDIR);
  call_js(m, i, OP_RMDIR, req, (double)parent, 0, 0, 0, name, NULL, NULL);
}
static void ll_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
  START(OP_SYMLINK);
  call_js(m, i, OP_SYMLINK, req, (double)parent, 0, 0, 0, name, link, NULL);
}
static void ll_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags) {
  START(OP_RENAME);
  call_js(m, i, OP_RENAME, req, (double)parent, (double)newparent, flags, 0, name, newname, NULL);
}
static void ll_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname) {
  START(OP_LINK);
  call_js(m, i, OP_LINK, req, (double)ino, (double)newparent, 0, 0, newname, NULL, NULL);
}
static void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  START(OP_OPEN);
  call_js(m, i, OP_OPEN, req, (double)ino, fi->flags, m->kill_suidgid ? 1 : 0, 0, NULL, NULL, NULL);
}
static void ll_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi) {
  START(OP_CREATE);
  call_js(m, i, OP_CREATE, req, (double)parent, mode, fi->flags, m->kill_suidgid ? 1 : 0, name, NULL, NULL);
}

/* a Buffer over `len` bytes at `data` for JS, referenced from the slot so reply can detach it */
static napi_value view(struct mnt *m, uint32_t i, char *data, size_t len) {
  napi_value b;
  if (napi_create_external_buffer(m->env, len, len ? data : (char *)"", NULL, NULL, &b) != napi_ok) return NULL;
  napi_create_reference(m->env, b, 1, &slots[i].bufref);
  return b;
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  START(OP_READ);
  m->bulk = size >= SPIN_BULK_BYTES;
  struct slot *s = &slots[i];
  s->size = size;
  if (size <= m->lim.max_write) {
    s->mem = m->n_read ? m->read_pool[--m->n_read] : malloc(m->lim.max_write);
    s->pool = POOL_READ;
  } else {
    s->mem = malloc(size);
    s->pool = POOL_NONE;
  }
  if (!s->mem) { fuse_reply_err(req, ENOMEM); slot_free(i); return; }
  napi_value b = view(m, i, s->mem, size);
  if (!b) { slot_release_mem(m->env, s); fuse_reply_err(req, EIO); slot_free(i); return; }
  call_js(m, i, OP_READ, req, (double)ino, (double)fi->fh, (double)size, (double)off, NULL, NULL, b);
}
/* The data lies in the receive buffer: the request keeps it (libfuse gets another for the next
 * receive) until JS answers, so the write reaches the core without a copy. */
static void ll_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  START(OP_WRITE);
  m->bulk = size >= SPIN_BULK_BYTES;
  struct slot *s = &slots[i];
  s->size = size;
  char *base = m->fbuf.mem;
  if (base && buf >= base && buf < base + m->fbuf.size) {
    s->mem = base;
    s->pool = POOL_RECV;
    m->stolen = 1;
  }
  napi_value b = view(m, i, (char *)buf, size);
  if (!b) { slot_release_mem(m->env, s); fuse_reply_err(req, EIO); slot_free(i); return; }
  /* scratch[0]: the writer lacks CAP_FSETID, setuid/setgid go first (see KILLPRIV) */
  ((double *)scratch)[0] = m->kill_suidgid ? 1 : 0;
  call_js(m, i, OP_WRITE, req, (double)ino, (double)fi->fh, (double)size, (double)off, NULL, NULL, b);
}
static void ll_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  START(OP_FLUSH);
  call_js(m, i, OP_FLUSH, req, (double)ino, (double)fi->fh, 0, 0, NULL, NULL, NULL);
}
static void ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  START(OP_RELEASE);
  call_js(m, i, OP_RELEASE, req, (double)ino, (double)fi->fh, 0, 0, NULL, NULL, NULL);
}
static void ll_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
  START(OP_FSYNC);
  call_js(m, i, OP_FSYNC, req, (double)ino, (double)fi->fh, datasync, 0, NULL, NULL, NULL);
}
static void ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  START(OP_OPENDIR);
  call_js(m, i, OP_OPENDIR, req, (double)ino, 0, 0, 0, NULL, NULL, NULL);
}
static void readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi, int plus) {
  START(OP_READDIR);
  slots[i].size = size;
  slots[i].off = off < 0 ? 0 : off;
  slots[i].plus = plus;
  napi_value p;
  napi_get_boolean(m->env, plus, &p);
  call_js(m, i, OP_READDIR, req, (double)ino, (double)fi->fh, (double)slots[i].off, (double)size, NULL, NULL, p);
}
static void ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  readdir_common(req, ino, size, off, fi, 0);
}
static void ll_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  readdir_common(req, ino, size, off, fi, 1);
}
static void ll_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  START(OP_RELEASEDIR);
  call_js(m, i, OP_RELEASEDIR, req, (double)ino, (double)fi->fh, 0, 0, NULL, NULL, NULL);
}
static void ll_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
  /* directory entries go to the backend as they change; nothing is pending here */
  fuse_reply_err(req, 0);
}
static void ll_statfs(fuse_req_t req, fuse_ino_t ino) {
  START(OP_STATFS);
  call_js(m, i, OP_STATFS, req, (double)ino, 0, 0, 0, NULL, NULL, NULL);
}
static void ll_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size, int flags) {
  START(OP_SETXATTR);
  napi_value b;
  void *copy;
  if (napi_create_buffer_copy(m->env, size, size ? value : "", &copy, &b) != napi_ok) { fuse_reply_err(req, ENOMEM); slot_free(i); return; }
  call_js(m, i, OP_SETXATTR, req, (double)ino, flags, 0, 0, name, NULL, b);
}
/*
 * The kernel asks for security.capability before every write (file_remove_privs: FUSE never
 * marks an inode S_NOSEC), so with xattrs on, each write would cost a second request through
 * JS. The mount never reports file capabilities (src/backend/xattr-names.ts: always absent), so
 * it is answered here, at once.
 */
static void ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
  if (strcmp(name, "security.capability") == 0) { fuse_reply_err(req, ENODATA); return; }
  START(OP_GETXATTR);
  slots[i].size = size;
  call_js(m, i, OP_GETXATTR, req, (double)ino, (double)size, 0, 0, name, NULL, NULL);
}
static void ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  START(OP_LISTXATTR);
  slots[i].size = size;
  call_js(m, i, OP_LISTXATTR, req, (double)ino, (double)size, 0, 0, NULL, NULL, NULL);
}
static void ll_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) {
  START(OP_REMOVEXATTR);
  call_js(m, i, OP_REMOVEXATTR, req, (double)ino, 0, 0, 0, name, NULL, NULL);
}
static void ll_access(fuse_req_t req, fuse_ino_t ino, int mask) {
  START(OP_ACCESS);
  call_js(m, i, OP_ACCESS, req, (double)ino, mask, 0, 0, NULL, NULL, NULL);
}
/* fallocate: the mode goes through the scratch record (f[0]), offset/length as b/c */
static void ll_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length, struct fuse_file_info *fi) {
  START(OP_FALLOCATE);
  ((double *)scratch)[0] = mode;
  call_js(m, i, OP_FALLOCATE, req, (double)ino, (double)fi->fh, (double)offset, (double)length, NULL, NULL, NULL);
}
/* copy_file_range: the source (fh, offset) as a/b, the length as c; the destination (ino, fh,
 * offset) and flags through the scratch record (f[0..3]) */
static void ll_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
                               fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len, int flags) {
  START(OP_COPY_FILE_RANGE);
  slots[i].size = len; /* the answer may not claim more */
  double *f = (double *)scratch;
  f[1] = (double)fi_out->fh; f[2] = (double)off_out; f[3] = flags;
  call_js(m, i, OP_COPY_FILE_RANGE, req, (double)ino_in, (double)fi_in->fh, (double)off_in, (double)len, NULL, NULL, NULL);
}
static void ll_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi) {
  START(OP_LSEEK);
  call_js(m, i, OP_LSEEK, req, (double)ino, (double)fi->fh, (double)off, whence, NULL, NULL, NULL);
}

static void ll_init(void *userdata, struct fuse_conn_info *conn) {
  struct mnt *m = userdata;
  if (m->lim.max_write && m->lim.max_write < conn->max_write) conn->max_write = m->lim.max_write;
  /* must equal the max_read mount option (libfuse refuses the session otherwise) */
  conn->max_read = m->lim.max_write;
  /* Not the first killpriv contract (the file system clears setuid/setgid at every write, the
   * kernel cannot say who may keep them): v2 is negotiated by hand instead (see KILLPRIV). */
  conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
  /* The core keeps the kernel page cache out of the consistency story (writes go through). */
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
}

/* No getlk/setlk/flock on purpose: libfuse then leaves POSIX and flock locks to the kernel,
 * local to this mount (README, "Semantics and limits"). */
static const struct fuse_lowlevel_ops ll_ops = {
  .init = ll_init, .lookup = ll_lookup, .forget = ll_forget, .forget_multi = ll_forget_multi,
  .getattr = ll_getattr, .setattr = ll_setattr, .readlink = ll_readlink, .mkdir = ll_mkdir, .mknod = ll_mknod,
  .unlink = ll_unlink, .rmdir = ll_rmdir, .symlink = ll_symlink, .rename = ll_rename,
  .link = ll_link, .open = ll_open, .read = ll_read, .write = ll_write, .flush = ll_flush,
  .release = ll_release, .fsync = ll_fsync, .opendir = ll_opendir, .readdir = ll_readdir,
  .readdirplus = ll_readdirplus, .releasedir = ll_releasedir, .fsyncdir = ll_fsyncdir,
  .statfs = ll_statfs, .access = ll_access, .create = ll_create,
  .fallocate = ll_fallocate, .copy_file_range = ll_copy_file_range, .lseek = ll_lseek,
};

/* ---- replies (JS thread, any time after the request) -------------------------------------- */

/* Pack names[off..] into one readdir reply of at most s->size bytes; records (128 bytes each, as
 * the scratch) describe names[off], names[off + 1], ... as far as they go (plain readdir reads
 * only their mode and inode; nodeid 0 in a readdirplus record: no lookup, inode and type only). Returns how many
 * entries went out, or -errno. */
static int reply_readdir(napi_env env, struct slot *s, napi_value list, napi_value attrs) {
  bool is_array = false;
  if (napi_is_array(env, list, &is_array) != napi_ok || !is_array) return -EIO;
  uint32_t n = 0;
  napi_get_array_length(env, list, &n);
  char *rec = NULL;
  size_t rec_len = 0;
  if (attrs) {
    bool is_ab = false;
    napi_is_arraybuffer(env, attrs, &is_ab);
    if (!is_ab || napi_get_arraybuffer_info(env, attrs, (void **)&rec, &rec_len) != napi_ok) rec = NULL;
  }
  char *buf = malloc(s->size ? s->size : 1);
  if (!buf) return -ENOMEM;
  size_t pos = 0;
  int sent = 0;
  char name[1024];
  for (uint32_t i = (uint32_t)s->off; i < n; i++) {
    napi_value v;
    size_t len = 0;
    if (napi_get_element(env, list, i, &v) != napi_ok || name_from_js(env, v, name, sizeof name, &len) != napi_ok || len >= sizeof name) {
      free(buf);
      return -EIO;
    }
    size_t k = i - (uint32_t)s->off;
    const char *r = rec && (k + 1) * RECORD <= rec_len ? rec + k * RECORD : NULL;
    size_t need;
    if (s->plus) {
      struct fuse_entry_param e;
      memset(&e, 0, sizeof e);
      if (r && ((const double *)r)[0] != 0) {
        fill_entry(s->m, &e, r);
        /* no node ('.', '..', a parent gone): the entry still names its inode and type */
        if (!e.ino) { e.attr.st_ino = (ino_t)((const double *)r)[4]; e.attr.st_mode = (mode_t)((const double *)r)[0]; }
      } else {
        e.attr.st_ino = UNKNOWN_INO;
      }
      if (!e.ino) { e.entry_timeout = 0; e.attr_timeout = 0; }
      need = fuse_add_direntry_plus(s->req, buf + pos, s->size - pos, name, &e, (off_t)i + 1);
    } else {
      struct stat st;
      memset(&st, 0, sizeof st);
      st.st_ino = UNKNOWN_INO;
      if (r && ((const double *)r)[0] != 0) { st.st_ino = (ino_t)((const double *)r)[4]; st.st_mode = (mode_t)((const double *)r)[0]; }
      need = fuse_add_direntry(s->req, buf + pos, s->size - pos, name, &st, (off_t)i + 1);
    }
    if (need > s->size - pos) break;
    pos += need;
    sent++;
  }
  fuse_reply_buf(s->req, buf, pos);
  free(buf);
  return sent;
}

static int reply_names(napi_env env, struct slot *s, napi_value list) {
  bool is_array = false;
  if (napi_is_array(env, list, &is_array) != napi_ok || !is_array) return fuse_reply_err(s->req, EIO), 0;
  uint32_t n = 0;
  napi_get_array_length(env, list, &n);
  size_t total = 0;
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    size_t len = 0;
    if (napi_get_element(env, list, i, &v) != napi_ok || name_from_js(env, v, NULL, 0, &len) != napi_ok) {
      return fuse_reply_err(s->req, EIO), 0;
    }
    total += len + 1;
  }
  if (s->size == 0) return fuse_reply_xattr(s->req, total), 0;
  if (total > s->size) return fuse_reply_err(s->req, ERANGE), 0;
  char *buf = malloc(total ? total : 1);
  if (!buf) return fuse_reply_err(s->req, ENOMEM), 0;
  size_t at = 0, len;
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    napi_get_element(env, list, i, &v);
    name_from_js(env, v, buf + at, total - at, &len);
    at += len + 1;
  }
  fuse_reply_buf(s->req, buf, total);
  free(buf);
  return 0;
}

static void reply_bytes(napi_env env, struct slot *s, napi_value v) {
  void *data = NULL;
  size_t len = 0;
  bool isbuf = false;
  napi_is_buffer(env, v, &isbuf);
  if (!isbuf || napi_get_buffer_info(env, v, &data, &len) != napi_ok) { fuse_reply_err(s->req, EIO); return; }
  if (s->size == 0) fuse_reply_xattr(s->req, len);
  else if (len > s->size) fuse_reply_err(s->req, ERANGE);
  else fuse_reply_buf(s->req, data, len);
}

static void reply_readlink(napi_env env, struct slot *s, napi_value v) {
  char buf[PATH_MAX + 1];
  size_t len = 0;
  if (name_from_js(env, v, buf, sizeof buf, &len) != napi_ok) { fuse_reply_err(s->req, EIO); return; }
  if (len >= sizeof buf) { fuse_reply_err(s->req, ENAMETOOLONG); return; }
  fuse_reply_readlink(s->req, buf);
}

/* An OPEN/CREATE answer's third argument: its open flags (OPEN_NOFLUSH in the binding's TS). */
#define OPEN_NOFLUSH 1
static uint32_t open_flags(napi_env env, size_t argc, napi_value *argv) {
  uint32_t flags = 0;
  if (argc >= 3 && napi_get_value_uint32(env, argv[2], &flags) != napi_ok) flags = 0;
  return flags;
}

/*
 * reply(id, code, payload?, attrs?) -> -1 if the request was no longer waiting, else the number
 * of entries sent (readdir) or 0. code < 0 is an errno; >= 0 a result (fh, byte count).
 * Entry and attribute replies read the scratch record, written by JS just before.
 */
static napi_value js_reply(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4], result;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  double id = -1, code = -EIO;
  napi_get_value_double(env, argv[0], &id);
  if (napi_get_value_double(env, argv[1], &code) != napi_ok) code = -EIO;
  uint32_t i;
  if (slot_find(id, &i) != 0) {
    napi_create_int32(env, -1, &result);
    return result;
  }
  struct slot *s = &slots[i];
  struct mnt *m = s->m;
  fuse_req_t req = s->req;
  /* an LSEEK offset may pass INT_MAX: its reply reads `code` itself */
  int rc = code > INT_MAX ? INT_MAX : (int)code, sent = 0;
  if (rc < 0) {
    slot_release_mem(env, s);
    if (s->op == OP_LOOKUP && rc == -ENOENT && m->lim.negative_timeout > 0) {
      struct fuse_entry_param e;
      memset(&e, 0, sizeof e);
      e.entry_timeout = m->lim.negative_timeout;
      fuse_reply_entry(req, &e);
    } else {
      fuse_reply_err(req, -rc);
    }
  } else {
    switch (s->op) {
      case OP_LOOKUP: case OP_MKDIR: case OP_MKNOD: case OP_SYMLINK: case OP_LINK: {
        struct fuse_entry_param e;
        fill_entry(m, &e, scratch);
        fuse_reply_entry(req, &e);
        break;
      }
      case OP_CREATE: {
        struct fuse_entry_param e;
        struct fuse_file_info fi;
        fill_entry(m, &e, scratch);
        memset(&fi, 0, sizeof fi);
        fi.fh = (uint64_t)code;
        fi.noflush = (open_flags(env, argc, argv) & OPEN_NOFLUSH) != 0;
        fuse_reply_create(req, &e, &fi);
        break;
      }
      case OP_GETATTR: case OP_SETATTR: {
        struct stat st;
        fill_stat_rec(&st, scratch);
        fuse_reply_attr(req, &st, m->lim.attr_timeout);
        break;
      }
      case OP_OPEN: case OP_OPENDIR: {
        struct fuse_file_info fi;
        memset(&fi, 0, sizeof fi);
        fi.fh = (uint64_t)code;
        fi.noflush = (open_flags(env, argc, argv) & OPEN_NOFLUSH) != 0;
        fuse_reply_open(req, &fi);
        break;
      }
      case OP_READ:
        fuse_reply_buf(req, s->mem, (size_t)rc > s->size ? s->size : (size_t)rc);
        slot_release_mem(env, s);
        break;
      case OP_WRITE:
        slot_release_mem(env, s);
        fuse_reply_write(req, (size_t)rc > s->size ? s->size : (size_t)rc);
        break;
      case OP_READDIR:
        if (argc < 3) { fuse_reply_err(req, EIO); break; }
        sent = reply_readdir(env, s, argv[2], argc > 3 ? argv[3] : NULL);
        if (sent < 0) { fuse_reply_err(req, -sent); sent = 0; }
        break;
      case OP_STATFS: {
        struct statvfs sv;
        fill_statvfs_from(&sv, (const double *)scratch);
        fuse_reply_statfs(req, &sv);
        break;
      }
      case OP_READLINK:
        if (argc < 3) fuse_reply_err(req, EIO); else reply_readlink(env, s, argv[2]);
        break;
      case OP_GETXATTR:
        if (argc < 3) fuse_reply_err(req, EIO); else reply_bytes(env, s, argv[2]);
        break;
      case OP_LISTXATTR:
        if (argc < 3) fuse_reply_err(req, EIO); else reply_names(env, s, argv[2]);
        break;
      case OP_COPY_FILE_RANGE:
        if ((size_t)code > s->size) fuse_reply_err(req, EIO); else fuse_reply_write(req, (size_t)code);
        break;
      case OP_LSEEK: /* an offset: may pass 2^31, so from the double, not rc */
        fuse_reply_lseek(req, (off_t)code);
        break;
      default:
        fuse_reply_err(req, 0);
    }
  }
  slot_free(i);
  napi_create_int32(env, sent, &result);
  return result;
}

/* ---- the session in Node's loop ----------------------------------------------------------- */

static void report_closed(struct mnt *m) {
  if (m->closed_reported) return;
  m->closed_reported = 1;
  call_closed(m->env, m->recv, m->fn, OP_CLOSED);
}

/*
 * How many requests one wake-up reads. Reading until EAGAIN costs a failing read(2) per
 * wake-up, and with one caller at a time (it waits for our reply before its next request) every
 * wake-up finds one request: measured, 5 of 12 reads per file create failed. So after SINGLES
 * wake-ups in a row found one request, read one per wake-up (the fd is level-triggered: a
 * request left queued wakes us again at once), and drain again when requests are in flight in
 * JS (they may have company) or every PROBE-th wake-up, which finds out whether they now queue
 * up (parallel callers: several per wake-up, promise jobs once per batch).
 */
#define SINGLES 4
#define PROBE 16

/*
 * Read and process queued requests (all of them when `drain`, else one) in one callback
 * scope: promise jobs run once, after the batch, when the scope closes. Returns how many.
 */
static uint64_t serve(struct mnt *m, int drain) {
  napi_env env = m->env;
  napi_handle_scope hs;
  napi_open_handle_scope(env, &hs);
  napi_value resource;
  napi_get_reference_value(env, m->js.handler, &m->fn);
  napi_get_reference_value(env, m->js.resource, &resource);
  napi_get_undefined(env, &m->recv);
  napi_callback_scope cs;
  napi_open_callback_scope(env, resource, m->js.actx, &cs);
  uint64_t batch = 0;
  for (;;) {
    if (!m->fbuf.mem && m->n_recv) m->fbuf.mem = m->recv_pool[--m->n_recv];
    int res = fuse_session_receive_buf(m->se, &m->fbuf);
    if (res == -EINTR) continue;
    if (res == -EAGAIN) break;
    /* 0: the session exited (ENODEV: unmounted, by us or from outside); < 0: a read error */
    if (res <= 0) { m->closed = 1; break; }
    m->stolen = 0;
    napi_handle_scope inner;
    napi_open_handle_scope(env, &inner);
    fuse_session_process_buf(m->se, &m->fbuf);
    napi_close_handle_scope(env, inner);
    if (m->stolen) m->fbuf.mem = NULL;
    batch++;
    if (fuse_session_exited(m->se)) { m->closed = 1; break; }
    if (!drain) break;
  }
  if (batch) {
    m->requests += batch;
    m->batches++;
    if (batch > m->max_batch) m->max_batch = batch;
  }
  if (m->closed) {
    uv_poll_stop(&m->poll);
    uv_check_stop(&m->spin);
    report_closed(m);
  }
  napi_close_callback_scope(env, cs);
  napi_close_handle_scope(env, hs);
  return batch;
}

/* Requests that are ready: all of them, or one when they come one at a time (SINGLES). */
static uint64_t take(struct mnt *m) {
  int drain = m->singles < SINGLES || m->inflight > 0 || (++m->wakeups & (PROBE - 1)) == 0;
  uint64_t batch = serve(m, drain);
  if (drain && batch) m->singles = batch == 1 ? m->singles + 1 : 0;
  return batch;
}

static void on_poll(uv_poll_t *h, int status, int events) {
  struct mnt *m = h->data;
  if (m->destroyed || m->closed) return;
  if (m->idle_since) {
    /* a request that came within the window after the last answer: spinning would have
     * caught it, so the next idle time spins */
    m->spin_on = now_ns() - m->idle_since < m->spin_ns;
    m->idle_since = 0;
  }
  take(m);
}

/*
 * SPIN: the busy-poll after the last answer (mount option busyPollMicros, DEFAULTS.busyPollMicros).
 * A caller that works one request at a time (a stat loop, create-write-close, git, tar) sends its
 * next request some tens of microseconds after our answer wakes it. Sleeping in epoll meanwhile
 * makes every request pay a wake-up of this thread from an idle CPU, which on a VM costs about
 * as much as serving it: a stat loop ran 3.4x faster with caller and daemon pinned to one CPU,
 * for bindfs as for us. So once nothing is in flight, this check handle (run after each poll
 * phase, when the batch's microtasks have run and its answers are out; before setImmediate
 * callbacks, which src/ does not use) keeps polling the session fd for up to spin_ns after the
 * last answer (stamped in slot_free) and serves what comes. It spins only while requests keep
 * coming within the window (spin_on: the last one did), yields the CPU between polls (a caller
 * on this CPU runs at once), and goes back to the loop after SPIN_SLICE_NS of serving so timers
 * and I/O completions wait no longer than that. Not after a bulk READ or WRITE (SPIN_BULK_BYTES):
 * a wake-up is little beside moving 1 MiB, and a spinning vCPU there took host CPU from the
 * disk: dd of a cold 512 MiB file fell from 1.2-1.5 GB/s to 0.5-1.9 GB/s, its copies from the
 * page cache (_copy_to_iter) running 3x slower.
 * Not on a contended CPU: a yield that comes back after more than the window means another task
 * (a neighbour process, not a caller about to send its next request) ran on this CPU meanwhile.
 * A spinning thread is runnable, so when the request comes it waits for that task's time slice
 * to end (milliseconds); a thread asleep in epoll is woken and preempts at once. So such a yield
 * ends the spin, and no spin starts for a while (issue 17: a busy agent host). The pause starts
 * at SPIN_BACKOFF_MIN_NS and doubles up to SPIN_BACKOFF_MAX_NS while every yield we make comes
 * back late (a neighbour that keeps its CPU busy); one yield that comes back in time resets it.
 * A single long yield on a quiet machine (a kworker, a monitor waking for a millisecond) used to
 * stop the spin for 100 ms, longer than a whole 3,000-file stat loop: stat-uncached fell to 0.58x
 * of the build before the backoff, with 2 long yields in a run and 542 of 3,000 requests caught.
 */
#define SPIN_SLICE_NS 2000000u
#define SPIN_BACKOFF_MIN_NS 1000000u
#define SPIN_BACKOFF_MAX_NS 100000000u

static void on_spin(uv_check_t *h) {
  struct mnt *m = h->data;
  if (m->destroyed || m->closed) return;
  if (m->inflight > 0) return; /* answers still to come from JS: the loop must run for them */
  /* a wake-up that needed no answer (FORGET: git's unlinks send many) starts the window now */
  if (!m->idle_since) m->idle_since = now_ns();
  if (!m->spin_on || !m->spin_ns || m->bulk) return;
  uint64_t start = now_ns();
  if (start < m->spin_quiet_at) return;
  uint64_t slice_end = start + SPIN_SLICE_NS;
  for (;;) {
    struct pollfd pfd = { .fd = fuse_session_fd(m->se), .events = POLLIN };
    int ready = poll(&pfd, 1, 0);
    if (ready > 0) {
      m->spin_hits++;
      m->spin_requests += take(m);
      if (m->closed || m->destroyed || m->inflight > 0 || m->bulk || now_ns() >= slice_end) return;
      continue;
    }
    if (now_ns() - m->idle_since >= m->spin_ns) {
      m->spin_misses++;
      m->spin_on = 0;
      return;
    }
    uint64_t before = now_ns();
    sched_yield();
    uint64_t after = now_ns();
    if (after - before > m->spin_ns) {
      m->spin_contended++;
      if (m->spin_backoff_ns < SPIN_BACKOFF_MIN_NS) m->spin_backoff_ns = SPIN_BACKOFF_MIN_NS;
      m->spin_quiet_at = after + m->spin_backoff_ns;
      m->spin_backoff_ns = m->spin_backoff_ns >= SPIN_BACKOFF_MAX_NS / 2 ? SPIN_BACKOFF_MAX_NS : m->spin_backoff_ns * 2;
      return;
    }
    m->spin_backoff_ns = SPIN_BACKOFF_MIN_NS;
  }
}

static void mnt_free(struct mnt *m) {
  free(m->fbuf.mem);
  for (int k = 0; k < m->n_recv; k++) free(m->recv_pool[k]);
  for (int k = 0; k < m->n_read; k++) free(m->read_pool[k]);
  free(m);
}
static void on_closed_handle(uv_handle_t *h) {
  struct mnt *m = h->data;
  if (--m->closing_handles == 0) mnt_free(m);
}

/*
 * KILLPRIV: FUSE_HANDLE_KILLPRIV_V2. Without it the kernel asks for security.capability
 * (GETXATTR) before every write, to see whether the write must drop it: a second round trip per
 * WRITE, 7% of sequential-write throughput (docs/bench). With it the kernel marks an inode
 * S_NOSEC after one such check, until its attributes are next refreshed, and leaves clearing
 * setuid/setgid to the file system: it flags a WRITE, a truncating SETATTR or OPEN whose caller
 * lacks CAP_FSETID, and every chown of a non-directory (src/fuse/native-ll-binding.ts clears
 * the bits, the rule of should_remove_suid). The store never holds security.capability (GETXATTR
 * answers ENODATA, setting it is EPERM), so no capability is left to drop.
 * libfuse 3.14 can neither negotiate v2 nor pass on its flags (only SETATTR's, as
 * FUSE_SET_ATTR_KILL_SUID), so the session's reads and writes go through these hooks
 * (fuse_session_custom_io) that see the raw stream: the INIT answer gains the flag where the
 * kernel offered it, and each request's "clear setuid/setgid" flag is noted for the op that
 * processes it (libfuse processes a request right after reading it, on this thread).
 */
/* fuse_session_custom_io came with libfuse 3.13; an older one runs without v2 (no flags come) */
#define HAVE_CUSTOM_IO (FUSE_MAJOR_VERSION > 3 || (FUSE_MAJOR_VERSION == 3 && FUSE_MINOR_VERSION >= 13))
#if HAVE_CUSTOM_IO
static ssize_t raw_read(int fd, void *buf, size_t len, void *userdata) {
  struct mnt *m = userdata;
  ssize_t n = read(fd, buf, len);
  m->kill_suidgid = 0;
  if (n < (ssize_t)sizeof(struct fuse_in_header)) return n;
  const struct fuse_in_header *h = buf;
  const char *arg = (const char *)buf + sizeof *h;
  size_t alen = (size_t)n - sizeof *h;
  switch (h->opcode) {
  case FUSE_INIT:
    if (alen >= offsetof(struct fuse_init_in, flags) + sizeof(uint32_t)) {
      m->init_unique = h->unique;
      m->init_flags = ((const struct fuse_init_in *)arg)->flags;
    }
    break;
  case FUSE_WRITE:
    if (alen >= sizeof(struct fuse_write_in))
      m->kill_suidgid = ((const struct fuse_write_in *)arg)->write_flags & FUSE_WRITE_KILL_SUIDGID;
    break;
  case FUSE_OPEN:
    if (alen >= sizeof(struct fuse_open_in))
      m->kill_suidgid = ((const struct fuse_open_in *)arg)->open_flags & FUSE_OPEN_KILL_SUIDGID;
    break;
  case FUSE_CREATE:
    if (alen >= sizeof(struct fuse_create_in))
      m->kill_suidgid = ((const struct fuse_create_in *)arg)->open_flags & FUSE_OPEN_KILL_SUIDGID;
    break;
  }
  return n;
}
static ssize_t raw_writev(int fd, struct iovec *iov, int count, void *userdata) {
  struct mnt *m = userdata;
  if (m->init_unique && count >= 2 && iov[0].iov_len >= sizeof(struct fuse_out_header)) {
    const struct fuse_out_header *h = iov[0].iov_base;
    if (h->unique == m->init_unique) {
      m->init_unique = 0;
      if (h->error == 0 && (m->init_flags & FUSE_HANDLE_KILLPRIV_V2) &&
          iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t)) {
        ((struct fuse_init_out *)iov[1].iov_base)->flags |= FUSE_HANDLE_KILLPRIV_V2;
      }
    }
  }
  return writev(fd, iov, count);
}
#endif

/* mount(mountpoint, handler, options, xattrs) -> handle */
static napi_value js_mount(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 4) { napi_throw_type_error(env, NULL, "mount(mountpoint, handler, options, xattrs)"); return NULL; }
  if (!scratch) { napi_throw_error(env, NULL, "setScratch() first"); return NULL; }
  char mountpoint[4096];
  size_t len;
  CHECK(napi_get_value_string_utf8(env, argv[0], mountpoint, sizeof mountpoint, &len));
  bool xattrs = false;
  napi_get_value_bool(env, argv[3], &xattrs);

  struct mount_limits lim;
  if (!mount_limits_init(env, argv[2], &lim)) return NULL;
  /* no fallback or cap here: mountOptions() (src/fuse/mount.ts) takes both from DEFAULTS */
  double busy_us = get_num(env, argv[2], "busyPollMicros", NAN);
  if (!(busy_us >= 0)) { napi_throw_type_error(env, NULL, "mount options need busyPollMicros >= 0"); return NULL; }
  struct mnt *m = calloc(1, sizeof *m);
  if (!m) { napi_throw_error(env, NULL, "out of memory"); return NULL; }
  m->env = env;
  m->lim = lim;
  struct mount_args ma;
  mount_args_init(env, argv[2], m->lim.max_write, &ma);
  struct fuse_args args = FUSE_ARGS_INIT(ma.argc, ma.argv);
  struct fuse_lowlevel_ops ops = ll_ops;
  if (xattrs) {
    ops.setxattr = ll_setxattr; ops.getxattr = ll_getxattr;
    ops.listxattr = ll_listxattr; ops.removexattr = ll_removexattr;
  }
  m->se = fuse_session_new(&args, &ops, sizeof ops, m);
  fuse_opt_free_args(&args);
  if (!m->se) { mnt_free(m); napi_throw_error(env, NULL, "fuse_session_new failed (bad options? see stderr)"); return NULL; }
  if (fuse_session_mount(m->se, mountpoint) != 0) {
    fuse_session_destroy(m->se);
    mnt_free(m);
    napi_throw_error(env, NULL, "fuse_session_mount failed (see stderr)");
    return NULL;
  }
  int fd = fuse_session_fd(m->se);
#if HAVE_CUSTOM_IO
  static const struct fuse_custom_io raw_io = { .read = raw_read, .writev = raw_writev };
  if (fuse_session_custom_io(m->se, &raw_io, fd) != 0) {
    fuse_session_unmount(m->se);
    fuse_session_destroy(m->se);
    mnt_free(m);
    napi_throw_error(env, NULL, "cannot hook the FUSE session's reads and writes");
    return NULL;
  }
#endif
  int fl = fcntl(fd, F_GETFL);
  uv_loop_t *loop;
  napi_get_uv_event_loop(env, &loop);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 || uv_poll_init(loop, &m->poll, fd) != 0) {
    fuse_session_unmount(m->se);
    fuse_session_destroy(m->se);
    mnt_free(m);
    napi_throw_error(env, NULL, "cannot watch the FUSE session fd");
    return NULL;
  }
  m->poll.data = m;
  uv_check_init(loop, &m->spin);
  m->spin.data = m;
  m->spin_ns = (uint64_t)(busy_us * 1000);
  m->spin_on = 1;
  if (m->spin_ns) {
    uv_check_start(&m->spin, on_spin);
    uv_unref((uv_handle_t *)&m->spin); /* only the poll handle keeps the process alive */
  }
  js_target_init(env, &m->js, "ledgerfs:fuse3-ll", argv[1]);
  uv_poll_start(&m->poll, UV_READABLE, on_poll);
  return mount_handle(env, m);
}

static struct mnt *arg_mnt(napi_env env, napi_callback_info info) { return arg_external(env, info); }

/*
 * destroy(handle): after the session ended (handler got OP_CLOSED). Requests JS has not
 * answered yet get EIO (the kernel is gone; this frees them) and their ids go stale; the poll
 * handle is closed while the fd is still ours, then the session unmounts (a no-op when already
 * unmounted) and closes the fd.
 */
static napi_value js_destroy(napi_env env, napi_callback_info info) {
  struct mnt *m = arg_mnt(env, info);
  if (!m || m->destroyed) return NULL;
  if (!m->closed) { napi_throw_error(env, NULL, "destroy() before the session ended"); return NULL; }
  m->destroyed = 1;
  for (uint32_t i = 0; i < nslots; i++) {
    if (!slots[i].req || slots[i].m != m) continue;
    slot_release_mem(env, &slots[i]);
    fuse_reply_err(slots[i].req, EIO);
    slot_free(i);
  }
  if (getenv("LEDGERFS_NATIVE_STATS")) {
    fprintf(stderr, "ledgerfs_fuse3_ll: %llu requests in %llu JS wake-ups (%.2f per wake-up, largest batch %llu)\n",
            (unsigned long long)m->requests, (unsigned long long)m->batches,
            m->batches ? (double)m->requests / (double)m->batches : 0.0, (unsigned long long)m->max_batch);
    fprintf(stderr, "ledgerfs_fuse3_ll: spin: %llu requests caught in %llu spins, %llu spins ran out, %llu given up on a contended CPU\n",
            (unsigned long long)m->spin_requests, (unsigned long long)m->spin_hits, (unsigned long long)m->spin_misses,
            (unsigned long long)m->spin_contended);
  }
  m->closing_handles = 2;
  uv_close((uv_handle_t *)&m->poll, on_closed_handle);
  uv_close((uv_handle_t *)&m->spin, on_closed_handle);
  fuse_session_unmount(m->se);
  fuse_session_destroy(m->se);
  m->se = NULL;
  js_target_free(env, &m->js);
  return NULL;
}

/* unref(handle): a busy mount is being detached lazily; it must not keep the process alive */
static napi_value js_unref(napi_env env, napi_callback_info info) {
  struct mnt *m = arg_mnt(env, info);
  if (m && !m->destroyed) uv_unref((uv_handle_t *)&m->poll);
  return NULL;
}

/* setScratch(arrayBuffer): the attribute record and the forget pairs (see RECORD/FORGET_AT) */
static napi_value js_set_scratch(napi_env env, napi_callback_info info) {
  char *data = keep_scratch(env, info, FORGET_AT + FORGET_CHUNK * 16, &scratch_ref, "setScratch");
  if (data) scratch = data;
  return NULL;
}

/*
 * invalAttr(handle, ino) -> 0 or -errno: the kernel forgets the attributes it cached for the
 * node (its i_size above all, which cuts reads of a file another host made longer), so its next
 * stat or read past the cached size asks us. Attributes only (offset -1): dropping pages would
 * lock them, and a page locked by a read waiting for this very thread would deadlock the write
 * to /dev/fuse; the page cache is dropped by the open reply instead (no keep_cache). Called from
 * the OPEN handler before its reply: the opener holds the inode, so the kernel's iput here
 * cannot evict it and send a FORGET we would have to read first.
 */
static napi_value js_inval_attr(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], result;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  struct mnt *m = NULL;
  double ino = 0;
  if (argc < 2 || napi_get_value_external(env, argv[0], (void **)&m) != napi_ok || napi_get_value_double(env, argv[1], &ino) != napi_ok) {
    napi_throw_type_error(env, NULL, "invalAttr(handle, ino)");
    return NULL;
  }
  int rc = -ENOTCONN;
  if (m && !m->destroyed && !m->closed && m->se) rc = fuse_lowlevel_notify_inval_inode(m->se, (fuse_ino_t)ino, -1, 0);
  napi_create_int32(env, rc, &result);
  return result;
}

/*
 * invalidate(handle, items) -> Promise<number>: the kernel forgets what it cached. `items` is a
 * flat array of pairs: (ino, null) drops a node's attributes (as invalAttr); (parent, name)
 * drops the directory entry `name` of `parent` (positive or negative), and with it the dentries
 * below it. For changes made without a request (a staged mount's overlay applied or dropped by
 * its daemon). Entry invalidation takes the parent directory's lock in the kernel, which a
 * lookup waiting for this very thread may hold: so the notifications are written from libuv's
 * thread pool, never from the JS thread, to a duplicate of the session's descriptor (the
 * session may end meanwhile: the write then fails, nothing else is touched). Resolves with how
 * many the kernel took (the rest were not cached, or the mount is gone).
 */
struct inval_job {
  napi_async_work work;
  napi_deferred deferred;
  int fd;
  size_t n;
  uint64_t *ids;
  char **names;   /* NULL: an attribute invalidation */
  int done;
};

static void inval_execute(napi_env env, void *data) {
  (void)env;
  struct inval_job *j = data;
  for (size_t i = 0; i < j->n; i++) {
    struct fuse_out_header out = { 0 };
    struct iovec iov[4];
    int cnt;
    struct fuse_notify_inval_inode_out ino;
    struct fuse_notify_inval_entry_out ent;
    if (!j->names[i]) {
      memset(&ino, 0, sizeof ino);
      ino.ino = j->ids[i];
      ino.off = -1; /* attributes only: pages are dropped at the next open (no keep_cache) */
      ino.len = 0;
      out.error = FUSE_NOTIFY_INVAL_INODE;
      out.len = sizeof out + sizeof ino;
      iov[1].iov_base = &ino;
      iov[1].iov_len = sizeof ino;
      cnt = 2;
    } else {
      memset(&ent, 0, sizeof ent);
      ent.parent = j->ids[i];
      ent.namelen = (uint32_t)strlen(j->names[i]);
      out.error = FUSE_NOTIFY_INVAL_ENTRY;
      out.len = (uint32_t)(sizeof out + sizeof ent + ent.namelen + 1);
      iov[1].iov_base = &ent;
      iov[1].iov_len = sizeof ent;
      iov[2].iov_base = j->names[i];
      iov[2].iov_len = ent.namelen + 1; /* with its NUL, as the kernel wants */
      cnt = 3;
    }
    iov[0].iov_base = &out;
    iov[0].iov_len = sizeof out;
    if (writev(j->fd, iov, cnt) >= 0) j->done++;
  }
}

static void inval_complete(napi_env env, napi_status status, void *data) {
  (void)status;
  struct inval_job *j = data;
  napi_value v;
  napi_create_int32(env, j->done, &v);
  napi_resolve_deferred(env, j->deferred, v);
  napi_delete_async_work(env, j->work);
  if (j->fd >= 0) close(j->fd);
  for (size_t i = 0; i < j->n; i++) free(j->names[i]);
  free(j->names);
  free(j->ids);
  free(j);
}

static napi_value js_invalidate(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], promise, res_name;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  struct mnt *m = NULL;
  uint32_t len = 0;
  if (argc < 2 || napi_get_value_external(env, argv[0], (void **)&m) != napi_ok || napi_get_array_length(env, argv[1], &len) != napi_ok || len % 2) {
    napi_throw_type_error(env, NULL, "invalidate(handle, [ino, name|null, ...])");
    return NULL;
  }
  struct inval_job *j = calloc(1, sizeof *j);
  if (!j) { napi_throw_error(env, NULL, "out of memory"); return NULL; }
  j->n = len / 2;
  j->ids = calloc(j->n ? j->n : 1, sizeof *j->ids);
  j->names = calloc(j->n ? j->n : 1, sizeof *j->names);
  j->fd = (m && !m->destroyed && !m->closed && m->se) ? fcntl(fuse_session_fd(m->se), F_DUPFD_CLOEXEC, 3) : -1;
  size_t k = 0; /* items kept: a name that cannot be taken is left out, never sent as another kind */
  for (size_t i = 0; j->ids && j->names && i < len / 2; i++) {
    napi_value id, nm;
    napi_valuetype t;
    double d = 0;
    napi_get_element(env, argv[1], (uint32_t)(2 * i), &id);
    if (napi_get_value_double(env, id, &d) != napi_ok || d < 1) continue;
    napi_get_element(env, argv[1], (uint32_t)(2 * i + 1), &nm);
    napi_typeof(env, nm, &t);
    if (t == napi_string) {
      char buf[NAME_MAX * 4 + 1];
      size_t l = 0;
      if (name_from_js(env, nm, buf, sizeof buf, &l) != napi_ok || l >= sizeof buf || l == 0) continue;
      char *copy = malloc(l + 1);
      if (!copy) continue;
      memcpy(copy, buf, l);
      copy[l] = 0;
      j->names[k] = copy;
    }
    j->ids[k++] = (uint64_t)d;
  }
  j->n = k;
  CHECK(napi_create_promise(env, &j->deferred, &promise));
  napi_create_string_utf8(env, "ledgerfs:invalidate", NAPI_AUTO_LENGTH, &res_name);
  CHECK(napi_create_async_work(env, NULL, res_name, inval_execute, inval_complete, j, &j->work));
  CHECK(napi_queue_async_work(env, j->work));
  return promise;
}

/*
 * stats(handle) -> [requests, JS wake-ups, requests the busy-poll caught, spins that caught one,
 * spins that ran out, spins given up on a contended CPU], the counts LEDGERFS_NATIVE_STATS prints
 * at the end, for metrics while mounted. Plain reads of this thread's own counters.
 */
static napi_value js_stats(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], result, v;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  struct mnt *m = NULL;
  if (argc < 1 || napi_get_value_external(env, argv[0], (void **)&m) != napi_ok || !m || m->destroyed) {
    napi_get_undefined(env, &result);
    return result;
  }
  const uint64_t counts[] = { m->requests, m->batches, m->spin_requests, m->spin_hits, m->spin_misses, m->spin_contended };
  CHECK(napi_create_array_with_length(env, sizeof counts / sizeof counts[0], &result));
  for (uint32_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    napi_create_double(env, (double)counts[k], &v);
    napi_set_element(env, result, k, v);
  }
  return result;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_value names, name;
  napi_create_array_with_length(env, OP_COUNT, &names);
  for (uint32_t k = 0; k < OP_COUNT; k++) {
    napi_create_string_utf8(env, op_names[k], NAPI_AUTO_LENGTH, &name);
    napi_set_element(env, names, k, name);
  }
  napi_set_named_property(env, exports, "opNames", names);
  napi_value fn;
  napi_create_function(env, "invalAttr", NAPI_AUTO_LENGTH, js_inval_attr, NULL, &fn);
  napi_set_named_property(env, exports, "invalAttr", fn);
  napi_create_function(env, "invalidate", NAPI_AUTO_LENGTH, js_invalidate, NULL, &fn);
  napi_set_named_property(env, exports, "invalidate", fn);
  napi_create_function(env, "stats", NAPI_AUTO_LENGTH, js_stats, NULL, &fn);
  napi_set_named_property(env, exports, "stats", fn);
  return define_exports(env, exports, js_mount, js_destroy, js_reply, js_unref, js_set_scratch);
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
