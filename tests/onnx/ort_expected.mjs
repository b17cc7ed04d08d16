// tests/onnx/ort_expected.mjs — ONNX Runtime as the parity test's oracle.
// For every <case>.onnx in a folder (written by make_models.py), runs ONNX
// Runtime (npm onnxruntime-node, from the repository's node_modules) on the
// case's <case>.in.<input>.npy files and writes <case>.out.<output>.npy.
// Graph optimisations are off and one thread is used, so the reference is the
// operators' plain semantics, not ORT's fused approximations. Without
// onnxruntime-node it writes FOLDER/SKIP with the reason and exits 0 (the
// parity test then skips and says why); a model ORT refuses is listed in
// FOLDER/ORT_REFUSED with ORT's message and fails this script.
//   node tests/onnx/ort_expected.mjs FOLDER
import fs from 'node:fs';
import path from 'node:path';
import { readNpy, writeNpy } from './npy.mjs';

const dir = process.argv[2];
if (!dir) {
  console.error('usage: node tests/onnx/ort_expected.mjs FOLDER');
  process.exit(2);
}
if (fs.existsSync(path.join(dir, 'SKIP'))) {
  console.log(`ort_expected: ${dir}/SKIP exists (models not generated); nothing to do`);
  process.exit(0);
}

let ort;
try {
  ort = (await import('onnxruntime-node')).default;
} catch (e) {
  const why = `onnxruntime-node is not installed (run scripts/install-node-deps.sh): ${String(e.message).split('\n')[0]}`;
  fs.writeFileSync(path.join(dir, 'SKIP'), why + '\n');
  console.log(`ort_expected: ${why}; wrote ${dir}/SKIP`);
  process.exit(0);
}

const ORT_TYPE = { float32: 'float32', float64: 'float64', int64: 'int64', int32: 'int32', bool: 'bool' };
const cases = fs.readdirSync(dir).filter((f) => f.endsWith('.onnx')).map((f) => f.slice(0, -5)).sort();
const refused = [];
let written = 0;
for (const name of cases) {
  for (const f of fs.readdirSync(dir)) {
    if (f.startsWith(name + '.out.')) fs.unlinkSync(path.join(dir, f));
  }
  let session;
  try {
    session = await ort.InferenceSession.create(path.join(dir, name + '.onnx'), {
      graphOptimizationLevel: 'disabled',
      intraOpNumThreads: 1,
      interOpNumThreads: 1,
    });
  } catch (e) {
    refused.push(`${name}: ${String(e.message).split('\n')[0]}`);
    continue;
  }
  const feeds = {};
  for (const input of session.inputNames) {
    const file = path.join(dir, `${name}.in.${input}.npy`);
    if (!fs.existsSync(file)) throw new Error(`${name}: no input file ${file}`);
    const t = readNpy(file);
    const type = ORT_TYPE[t.dtype];
    if (!type) throw new Error(`${file}: dtype ${t.dtype} is not fed to ORT`);
    feeds[input] = new ort.Tensor(type, t.data, t.shape);
  }
  let outputs;
  try {
    outputs = await session.run(feeds);
  } catch (e) {
    refused.push(`${name} (run): ${String(e.message).split('\n')[0]}`);
    continue;
  }
  for (const out of session.outputNames) {
    const t = outputs[out];
    if (!ORT_TYPE[t.type]) throw new Error(`${name}: output ${out} has type ${t.type}`);
    const data = t.type === 'bool' ? Uint8Array.from(t.data, (v) => (v ? 1 : 0)) : t.data;
    writeNpy(path.join(dir, `${name}.out.${out}.npy`), { dtype: t.type, shape: Array.from(t.dims), data });
    written++;
  }
  await session.release?.();
}
const refusedFile = path.join(dir, 'ORT_REFUSED');
if (refused.length) {
  fs.writeFileSync(refusedFile, refused.join('\n') + '\n');
  console.error(`ort_expected: ONNX Runtime refused ${refused.length} model(s):\n  ${refused.join('\n  ')}`);
} else if (fs.existsSync(refusedFile)) {
  fs.unlinkSync(refusedFile);
}
console.log(`ort_expected: ${cases.length - refused.length} of ${cases.length} models run, ${written} outputs written into ${dir}`);
process.exit(refused.length ? 1 : 0);
