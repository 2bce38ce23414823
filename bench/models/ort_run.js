// ONNX Runtime side of the benchmark, kept alive for a whole workload so
// that its batches interleave finely with the other systems':
//   node ort_run.js MODEL INPUT_DIR THREADS
// Inputs are raw little-endian files INPUT_DIR/<i>.bin described by
// INPUT_DIR/inputs.json ([{name, dtype, shape}]). Prints {"ready": true}
// once the session is made; then, for each line "WARMUP ITERS" on stdin,
// runs WARMUP untimed and ITERS timed runs and prints one JSON line:
// {"ms": [latency of each timed run]}. Ends with stdin.
const ort = require('onnxruntime-node');
const fs = require('fs');
const path = require('path');
const readline = require('readline');

async function main() {
  const [model, dir, threadsS] = process.argv.slice(2);
  const threads = parseInt(threadsS);
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all', executionMode: 'sequential'});
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'inputs.json')));
  const feeds = {};
  manifest.forEach((m, i) => {
    const buf = fs.readFileSync(path.join(dir, `${i}.bin`));
    const ab = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
    const data = m.dtype === 'float32' ? new Float32Array(ab) : m.dtype === 'int64' ? new BigInt64Array(ab)
               : m.dtype === 'int32' ? new Int32Array(ab) : m.dtype === 'bool' ? new Uint8Array(ab) : new Uint8Array(ab);
    feeds[m.name] = new ort.Tensor(m.dtype, data, m.shape);
  });
  console.log(JSON.stringify({ready: true}));
  for await (const line of readline.createInterface({input: process.stdin})) {
    const [warmup, iters] = line.trim().split(/\s+/).map((s) => parseInt(s));
    if (!(warmup >= 0 && iters > 0)) throw new Error(`expected "WARMUP ITERS", got ${JSON.stringify(line)}`);
    for (let i = 0; i < warmup; i++) await session.run(feeds);
    const ms = [];
    for (let i = 0; i < iters; i++) {
      const t0 = process.hrtime.bigint();
      await session.run(feeds);
      ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    console.log(JSON.stringify({ms}));
  }
}
main().catch((e) => { console.error(String(e)); process.exit(1); });
