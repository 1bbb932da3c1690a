// Reads a `segpipe dump` Arrow IPC stream with apache-arrow (JavaScript), an
// Arrow implementation that shares no code with arrow-go, and checks it
// against the JSON summary dump wrote beside it: the fixed_shape_tensor
// extension name and shape metadata of images and masks, the per-image
// split, every mask byte in {0,1}, the count of ON cells per batch and one
// probed mask cell.
//
// usage: node arrow_ipc_check.mjs BATCHES.arrows SUMMARY.json
// Exits non-zero on any mismatch. Prints "N passed, N failed" at the end.
import { readFileSync } from 'node:fs';
import { tableFromIPC } from 'apache-arrow';

const [file, summaryPath] = process.argv.slice(2);
if (!file || !summaryPath) {
  console.error('usage: node arrow_ipc_check.mjs BATCHES.arrows SUMMARY.json');
  process.exit(2);
}
const sum = JSON.parse(readFileSync(summaryPath, 'utf8'));
const table = tableFromIPC(readFileSync(file));

let passed = 0, failed = 0;
function check(name, ok, detail) {
  if (ok) { passed++; console.log(`ok   ${name}`); }
  else { failed++; console.log(`FAIL ${name}: ${detail}`); }
}
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

check('rows', table.numRows === sum.images, `${table.numRows} rows, summary says ${sum.images}`);
check('batches', table.batches.length === sum.batches.length,
  `${table.batches.length} record batches, summary says ${sum.batches.length}`);

// Extension metadata: name and shape, exactly as the canonical
// fixed_shape_tensor specification writes them.
function tensorMeta(field, what) {
  const name = field.metadata.get('ARROW:extension:name');
  check(`${what} extension name`, name === 'arrow.fixed_shape_tensor', `got ${name}`);
  let meta = {};
  try { meta = JSON.parse(field.metadata.get('ARROW:extension:metadata') ?? '{}'); }
  catch (e) { check(`${what} extension metadata is JSON`, false, e.message); }
  return meta;
}
const imageField = table.schema.fields.find((f) => f.name === 'image');
const masksField = table.schema.fields.find((f) => f.name === 'masks');
check('columns image and masks exist', imageField && masksField, table.schema.fields.map((f) => f.name).join(','));
const imMeta = tensorMeta(imageField, 'image');
check('image shape', same(imMeta.shape, sum.image_shape), `${JSON.stringify(imMeta.shape)} vs ${JSON.stringify(sum.image_shape)}`);
check('image storage size', imageField.type.listSize === sum.image_shape.reduce((a, b) => a * b, 1),
  `fixed_size_list of ${imageField.type.listSize}`);
const maskItem = masksField.type.children[0];
const mMeta = tensorMeta(maskItem, 'mask');
check('mask shape', same(mMeta.shape, sum.mask_shape), `${JSON.stringify(mMeta.shape)} vs ${JSON.stringify(sum.mask_shape)}`);
const [hp, wp] = sum.mask_shape;
check('mask storage size', maskItem.type.listSize === hp * wp, `fixed_size_list of ${maskItem.type.listSize}`);
const stride = table.schema.metadata.get('segpipe.mask_stride');
check('mask stride metadata', Number(stride) === sum.image_shape[1] / hp, `segpipe.mask_stride=${stride}`);

// The stack: one contiguous (sum_N, Hp, Wp) uint8 buffer per batch, split by
// boxes_per_image (= the list offsets).
function stackOf(batch) {
  const data = batch.getChild('masks').data[0];
  const fsl = data.children[0];
  const base = fsl.offset * hp * wp + fsl.children[0].offset;
  const first = data.valueOffsets[data.offset];
  const n = data.valueOffsets[data.offset + data.length] - first;
  return { values: fsl.children[0].values.subarray(base + first * hp * wp, base + (first + n) * hp * wp), n };
}
table.batches.forEach((batch, b) => {
  const want = sum.batches[b];
  const bpi = Array.from(batch.getChild('boxes_per_image').toArray());
  check(`batch ${b} boxes_per_image`, same(bpi, want.boxes_per_image), `${bpi} vs ${want.boxes_per_image}`);
  const { values, n } = stackOf(batch);
  check(`batch ${b} instances`, n === want.instances && values.length === n * hp * wp,
    `${n} masks, ${values.length} bytes`);
  let ones = 0, bad = 0;
  for (const v of values) { if (v === 1) ones++; else if (v !== 0) bad++; }
  check(`batch ${b} mask values in {0,1}`, bad === 0, `${bad} bytes neither 0 nor 1`);
  check(`batch ${b} ON cells`, ones === want.mask_ones, `${ones} vs ${want.mask_ones}`);
});
if (sum.probe) {
  const p = sum.probe;
  const { values } = stackOf(table.batches[p.batch]);
  const got = values[(p.instance * hp + p.row) * wp + p.col];
  check(`probe batch ${p.batch} mask ${p.instance} cell (${p.row},${p.col})`, got === p.value, `got ${got}, want ${p.value}`);
  // Its neighbourhood in the flat stack must not be the probe of another
  // instance: the cell just before the first ON cell of the row-major scan
  // is 0 unless it is the plane's first cell.
  const flat = (p.instance * hp + p.row) * wp + p.col;
  if (p.row * wp + p.col > 0) {
    check('probe is the first ON cell of its mask', values.subarray(p.instance * hp * wp, flat).every((v) => v === 0), 'an earlier ON cell');
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
