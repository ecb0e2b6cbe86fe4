#!/usr/bin/env node
// JS-side cost per FUSE request in fuse-native's handler/reply path, without a mount: the native
// signal functions are replaced by a counter, and the handler the C side would call is invoked
// directly, in batches of 1000 followed by a setImmediate (so nextTick/microtasks drain as they
// do after each native callback).
//   node native/bench-fuse-native-js.cjs [dir=node_modules/fuse-native] [promise|sync] [false|default] [getattr|access]
// promise: the op replies from a promise (.then), like the ledgerfs adapter; sync: inside the op.
const path = require('path')
const dir = path.resolve(process.argv[2] || path.join(__dirname, '../node_modules/fuse-native'))
const mode = process.argv[3] || 'promise'
const timeout = process.argv[4] || 'false'
const op = process.argv[5] || 'getattr'
const binding = require(require.resolve('node-gyp-build', { paths: [dir] }))(dir)
let signals = 0
for (const k of Object.keys(binding)) if (k.startsWith('fuse_native_signal_')) binding[k] = function () { signals++ }
const Fuse = require(dir)
const now = new Date()
const t = 1732000000123456789n
const st = { mode: 0o100644, size: 5, nlink: 1, uid: 0, gid: 0, ino: 7, mtime: now, atime: now, ctime: now, atimeNs: t, mtimeNs: t, ctimeNs: t }
const ops = {
  getattr: mode === 'sync' ? (p, cb) => cb(0, st) : (p, cb) => { Promise.resolve(st).then((s) => cb(0, s)) },
  access: mode === 'sync' ? (p, m, cb) => cb(0) : (p, m, cb) => { Promise.resolve().then(() => cb(0)) }
}
const fuse = new Fuse('/tmp', ops, { timeout: timeout === 'default' ? undefined : false })
const h = fuse._handlers[binding['op_' + op]]
const nh = Buffer.alloc(8)
async function batch (n) {
  for (let i = 0; i < n; i++) op === 'getattr' ? h(nh, 0, '/f') : h(nh, 0, '/f', 0)
  await new Promise(setImmediate)
}
;(async () => {
  for (let i = 0; i < 200; i++) await batch(1000)
  const N = 2000
  signals = 0
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < N; i++) await batch(1000)
  const dt = Number(process.hrtime.bigint() - t0)
  if (signals !== N * 1000) throw new Error('signals ' + signals)
  console.log(`${op} reply=${mode} timeout=${timeout}: ${(dt / (N * 1000)).toFixed(0)} ns/request`)
  process.exit(0)
})()
