{
  "variables": {
    "with_seccomp%": "<!(pkg-config --exists libseccomp && echo 1 || echo 0)"
  },
  "conditions": [
    ["with_seccomp==1", {
      "targets": [
        {
          "target_name": "ledgerfs_seccomp",
          "sources": ["ledgerfs_seccomp.c"],
          "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
          "libraries": ["-lseccomp"]
        }
      ]
    }]
  ],
  "targets": [
    {
      "target_name": "ledgerfs_fuse3_ll",
      "sources": ["ledgerfs_fuse3_ll.c", "ledgerfs_common.h", "ledgerfs_napi.h", "ledgerfs_names.h"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers",
                 "<!@(pkg-config --cflags fuse3)"],
      "libraries": ["<!@(pkg-config --libs fuse3)"]
    },
    {
      "target_name": "ledgerfs_local",
      "sources": ["ledgerfs_local.c", "ledgerfs_beneath.c", "ledgerfs_fdops.c", "ledgerfs_limits.c", "ledgerfs_xattr.c", "ledgerfs_notify.c", "ledgerfs_napi.h", "ledgerfs_names.h"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
    }
  ]
}
