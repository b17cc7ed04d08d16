// tests/onnx/npy.mjs — numpy's .npy format for the ONNX Runtime scripts (oracle and benchmark peer).
// Reads and writes version 1.0–3.0 files, little-endian C order, of the
// dtypes the tensor models use (float32, float64, int64, int32, bool, and the
// other integer widths on reading). Returns and takes {dtype, shape, data}
// with data a typed array (BigInt64Array for int64, Uint8Array for bool).
import fs from 'node:fs';

const DESCR = {
  '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array],
  '<i8': ['int64', BigInt64Array], '<i4': ['int32', Int32Array],
  '<i2': ['int16', Int16Array], '|i1': ['int8', Int8Array],
  '|u1': ['uint8', Uint8Array], '|b1': ['bool', Uint8Array],
  '<u8': ['uint64', BigUint64Array], '<u4': ['uint32', Uint32Array], '<u2': ['uint16', Uint16Array],
};
const TO_DESCR = Object.fromEntries(Object.entries(DESCR).map(([d, [n]]) => [n, d]));

export function parseNpy(buf, what = 'npy') {
  const magic = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]);
  if (buf.length < 10 || !buf.subarray(0, 6).equals(magic)) throw new Error(`${what}: not a .npy file`);
  const major = buf[6];
  let hlen, off;
  if (major === 1) { hlen = buf.readUInt16LE(8); off = 10; }
  else if (major === 2 || major === 3) { hlen = buf.readUInt32LE(8); off = 12; }
  else throw new Error(`${what}: unsupported .npy version ${major}`);
  if (off + hlen > buf.length) throw new Error(`${what}: truncated header`);
  const header = buf.subarray(off, off + hlen).toString('latin1');
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  const fortran = /'fortran_order':\s*(True|False)/.exec(header)?.[1];
  const shapeText = /'shape':\s*\(([^)]*)\)/.exec(header)?.[1];
  if (!descr || !fortran || shapeText === undefined) throw new Error(`${what}: bad header ${header}`);
  if (fortran === 'True') throw new Error(`${what}: Fortran order is not supported`);
  const entry = DESCR[descr === '<b1' ? '|b1' : descr];
  if (!entry) throw new Error(`${what}: unsupported dtype ${descr}`);
  const shape = shapeText.split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  const count = shape.reduce((a, b) => a * b, 1);
  const [dtype, Ctor] = entry;
  const start = off + hlen;
  const bytes = count * Ctor.BYTES_PER_ELEMENT;
  if (start + bytes > buf.length) throw new Error(`${what}: data shorter than its shape`);
  // Copy so the typed array is aligned whatever the header length.
  const copy = new Uint8Array(bytes);
  copy.set(buf.subarray(start, start + bytes));
  return { dtype, shape, data: new Ctor(copy.buffer, 0, count) };
}

export function readNpy(path) {
  return parseNpy(fs.readFileSync(path), path);
}

export function toNpy({ dtype, shape, data }) {
  const descr = TO_DESCR[dtype];
  if (!descr) throw new Error(`.npy: cannot write dtype ${dtype}`);
  const shapeText = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shapeText}, }`;
  // Pad so the data starts on a 64-byte boundary (numpy's own choice).
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const head = Buffer.alloc(10);
  Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0]).copy(head);
  head.writeUInt16LE(header.length, 8);
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return Buffer.concat([head, Buffer.from(header, 'latin1'), body]);
}

export function writeNpy(path, tensor) {
  fs.writeFileSync(path, toNpy(tensor));
}
