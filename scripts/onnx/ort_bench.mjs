// scripts/onnx/ort_bench.mjs — ONNX Runtime as `cairn bench-onnx`'s peer: one model, one batch size.
// Builds random inputs from the model's declared inputs (the first dim is the
// batch; other dynamic dims come from --dim name=value; float inputs uniform
// in [-1, 1), integer inputs in [0, 100) except those named *mask*, which are
// all 1; bool inputs random), warms up, runs back to back for --seconds and
// prints one JSON line:
//   {"batch":8,"latency_ms_p50":..,"latency_ms_p90":..,"instances_per_s":..,"runs":..}
// Session options: intraOpNumThreads = --threads, interOpNumThreads 1,
// graphOptimizationLevel 'all' (ORT at its best, as a user would run it).
//   node scripts/onnx/ort_bench.mjs MODEL.onnx --batch 8 --threads 2 --seconds 3 [--dim name=value ...]
// Exit status 3 when onnxruntime-node is not installed (the caller says so and
// skips the peer), 2 for bad arguments, 1 for anything ORT refuses.
import process from 'node:process';

function usage(msg) {
  console.error(`ort_bench: ${msg}`);
  console.error('usage: node scripts/onnx/ort_bench.mjs MODEL.onnx --batch N [--threads N] [--seconds S] [--dim name=value ...]');
  process.exit(2);
}

const args = { batch: 1, threads: 1, seconds: 3, dims: {} };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  const next = () => {
    if (i + 1 >= argv.length) usage(`${a} needs a value`);
    return argv[++i];
  };
  if (a === '--batch') args.batch = Number(next());
  else if (a === '--threads') args.threads = Number(next());
  else if (a === '--seconds') args.seconds = Number(next());
  else if (a === '--dim') {
    const m = /^([^=]+)=(\d+)$/.exec(next());
    if (!m) usage(`--dim wants name=value, got '${argv[i]}'`);
    args.dims[m[1]] = Number(m[2]);
  } else if (a.startsWith('--')) usage(`unknown option ${a}`);
  else if (!args.model) args.model = a;
  else usage(`unexpected argument ${a}`);
}
if (!args.model) usage('no model given');
for (const k of ['batch', 'threads']) {
  if (!Number.isInteger(args[k]) || args[k] < 1) usage(`--${k} must be a positive integer`);
}
if (!(args.seconds > 0)) usage('--seconds must be positive');

let ort;
try {
  ort = (await import('onnxruntime-node')).default;
} catch (e) {
  console.error(`ort_bench: onnxruntime-node is not installed (scripts/install-node-deps.sh): ${String(e.message).split('\n')[0]}`);
  process.exit(3);
}

let session;
try {
  session = await ort.InferenceSession.create(args.model, {
    intraOpNumThreads: args.threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
  });
} catch (e) {
  console.error(`ort_bench: ONNX Runtime refused ${args.model}: ${String(e.message).split('\n')[0]}`);
  process.exit(1);
}

// A deterministic generator, so both runtimes could be given the same data.
let seed = 12345;
const rand = () => {
  seed = (seed * 1103515245 + 12345) >>> 0;
  return seed / 4294967296;
};

const feeds = {};
for (const meta of session.inputMetadata) {
  if (!meta.isTensor) usage(`input ${meta.name} is not a tensor`);
  const shape = meta.shape.map((d, axis) => {
    if (axis === 0) return args.batch;
    if (typeof d === 'number' && d >= 0) return d;
    if (typeof d === 'string' && d in args.dims) return args.dims[d];
    usage(`input ${meta.name}: dim ${axis} is dynamic ('${d}'): give --dim ${d || 'NAME'}=N`);
  });
  const n = shape.reduce((a, b) => a * b, 1);
  let data;
  switch (meta.type) {
    case 'float32': data = Float32Array.from({ length: n }, () => rand() * 2 - 1); break;
    case 'int64':
      data = BigInt64Array.from({ length: n }, () => (/mask/i.test(meta.name) ? 1n : BigInt(Math.floor(rand() * 100))));
      break;
    case 'int32':
      data = Int32Array.from({ length: n }, () => (/mask/i.test(meta.name) ? 1 : Math.floor(rand() * 100)));
      break;
    case 'bool': data = Uint8Array.from({ length: n }, () => (rand() < 0.5 ? 1 : 0)); break;
    default: usage(`input ${meta.name}: dtype ${meta.type} is not generated`);
  }
  feeds[meta.name] = new ort.Tensor(meta.type, data, shape);
}

try {
  // Warm-up: at least 2 runs and 10% of the measured time (caches, ORT's allocator).
  const warmEnd = performance.now() + Math.min(args.seconds * 100, 1000);
  for (let i = 0; i < 2 || performance.now() < warmEnd; i++) await session.run(feeds);
  const lat = [];
  const start = performance.now();
  const end = start + args.seconds * 1000;
  while (performance.now() < end || lat.length < 3) {
    const t0 = performance.now();
    await session.run(feeds);
    lat.push(performance.now() - t0);
  }
  const total = (performance.now() - start) / 1000;
  lat.sort((a, b) => a - b);
  const pct = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))];
  const round = (x) => Math.round(x * 1000) / 1000;
  console.log(JSON.stringify({
    batch: args.batch,
    latency_ms_p50: round(pct(0.5)),
    latency_ms_p90: round(pct(0.9)),
    instances_per_s: round((args.batch * lat.length) / total),
    runs: lat.length,
  }));
} catch (e) {
  console.error(`ort_bench: run failed: ${String(e.message).split('\n')[0]}`);
  process.exit(1);
}
