/*
 * The seccomp filter of `ledgerfs run` (src/sandbox/seccomp.ts): libseccomp compiles the rules
 * and exports the BPF program that bwrap loads (--seccomp FD), so no BPF is written by hand and
 * the architecture checks (a 32-bit or x32 system call from a 64-bit sandbox) are libseccomp's.
 * Its own addon: it links libseccomp, which the local store and the FUSE bindings do not need.
 */
#define _GNU_SOURCE
#define ADDON_NAME "ledgerfs_seccomp"
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <errno.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_NAMES 128
#define MAX_NAME 64

static napi_value fail(napi_env env, scmp_filter_ctx ctx, int fd, const char *msg, const char *name) {
  char text[512];
  snprintf(text, sizeof text, ADDON_NAME ": %.200s%s%.200s", msg, name ? ": " : "", name ? name : "");
  if (ctx) seccomp_release(ctx);
  if (fd >= 0) close(fd);
  napi_throw_error(env, NULL, text);
  return NULL;
}

/* read the array of system call names argv[i] into names; the count, or -1 with an exception */
static int names_of(napi_env env, napi_value arr, char names[][MAX_NAME]) {
  uint32_t n = 0;
  if (napi_get_array_length(env, arr, &n) != napi_ok || n > MAX_NAMES) {
    napi_throw_type_error(env, NULL, ADDON_NAME ": expected an array of at most 128 system call names");
    return -1;
  }
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    size_t len;
    if (napi_get_element(env, arr, i, &v) != napi_ok ||
        napi_get_value_string_utf8(env, v, names[i], MAX_NAME, &len) != napi_ok) {
      napi_throw_type_error(env, NULL, ADDON_NAME ": system call names must be strings");
      return -1;
    }
  }
  return (int)n;
}

/*
 * sandboxFilter(refused, enosys, cloneNamespaceFlags) -> Buffer: a BPF program (struct
 * sock_filter[]) that allows every system call except: those named in `refused` (EPERM), those in
 * `enosys` (ENOSYS, so that a C library falls back: clone3, whose flags a filter cannot read),
 * and clone() with any of `cloneNamespaceFlags` set (EPERM: no new namespace, the user namespace
 * above all, in which a program would get back every capability). A name this architecture lacks
 * (umount on x86_64) is skipped by libseccomp; a name libseccomp does not know throws.
 * Anything else than the native architecture is killed (libseccomp's bad-architecture action).
 */
static napi_value js_sandbox_filter(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  static char refused[MAX_NAMES][MAX_NAME], enosys[MAX_NAMES][MAX_NAME];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3) return fail(env, NULL, -1, "sandboxFilter(refused, enosys, cloneNamespaceFlags) takes 3 arguments", NULL);
  int nr = names_of(env, argv[0], refused);
  if (nr < 0) return NULL;
  int ne = names_of(env, argv[1], enosys);
  if (ne < 0) return NULL;
  int64_t clone_flags = 0;
  if (napi_get_value_int64(env, argv[2], &clone_flags) != napi_ok) return fail(env, NULL, -1, "cloneNamespaceFlags must be a number", NULL);

  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return fail(env, NULL, -1, "seccomp_init failed", NULL);
  for (int i = 0; i < nr + ne; i++) {
    const char *name = i < nr ? refused[i] : enosys[i - nr];
    int sc = seccomp_syscall_resolve_name(name);
    if (sc == __NR_SCMP_ERROR) return fail(env, ctx, -1, "unknown system call", name);
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(i < nr ? EPERM : ENOSYS), sc, 0);
    if (rc != 0 && rc != -EDOM) return fail(env, ctx, -1, "seccomp_rule_add failed", name);
  }
  /* clone's flags are its first argument on x86_64 and arm64 alike; one rule per flag (rules of
   * one system call are or-ed), as a masked compare can only test for equality */
  for (int bit = 0; bit < 63; bit++) {
    scmp_datum_t flag = (scmp_datum_t)1 << bit;
    if (!((uint64_t)clone_flags & flag)) continue;
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)) != 0) {
      return fail(env, ctx, -1, "seccomp_rule_add failed", "clone");
    }
  }
  int fd = memfd_create("ledgerfs-seccomp", MFD_CLOEXEC);
  if (fd < 0) return fail(env, ctx, -1, "memfd_create failed", strerror(errno));
  if (seccomp_export_bpf(ctx, fd) != 0) return fail(env, ctx, fd, "seccomp_export_bpf failed", NULL);
  seccomp_release(ctx);
  struct stat st;
  if (fstat(fd, &st) != 0) return fail(env, NULL, fd, "fstat failed", strerror(errno));
  void *data = NULL;
  napi_value out;
  if (napi_create_buffer(env, (size_t)st.st_size, &data, &out) != napi_ok) return fail(env, NULL, fd, "napi_create_buffer failed", NULL);
  if (pread(fd, data, (size_t)st.st_size, 0) != st.st_size) return fail(env, NULL, fd, "reading the exported filter failed", NULL);
  close(fd);
  return out;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"sandboxFilter", NULL, js_sandbox_filter, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof *props, props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
