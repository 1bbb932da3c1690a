// Reads segpipe shards with DuckDB, a Parquet reader that shares no code
// with arrow-go, and checks them against the COCO file they came from.
//
// usage: node parquet_check.mjs SHARD_DIR COCO_INSTANCES_JSON
// Exits non-zero on any mismatch. Prints "N passed, N failed" at the end.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';

const [dir, cocoPath] = process.argv.slice(2);
if (!dir || !cocoPath) {
  console.error('usage: node parquet_check.mjs SHARD_DIR COCO_INSTANCES_JSON');
  process.exit(2);
}
const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8'));
const coco = JSON.parse(readFileSync(cocoPath, 'utf8'));
const glob = join(dir, 'part-*.parquet').replaceAll("'", "''");

const db = await DuckDBInstance.create(':memory:');
const conn = await db.connect();
const query = async (sql) => (await conn.runAndReadAll(sql)).getRowObjectsJS();

let passed = 0, failed = 0;
function check(name, ok, detail) {
  if (ok) { passed++; console.log(`ok   ${name}`); }
  else { failed++; console.log(`FAIL ${name}: ${detail}`); }
}

// Counts: DuckDB's view of the files against the manifest and the source.
const [c] = await query(`SELECT count(*) AS rows, sum(len(instances)) AS inst,
  count(DISTINCT image_id) AS ids FROM read_parquet('${glob}')`);
check('row count equals manifest.rows', Number(c.rows) === manifest.rows, `${c.rows} vs ${manifest.rows}`);
check('instance count equals manifest.instances', Number(c.inst) === manifest.instances, `${c.inst} vs ${manifest.instances}`);
check('image ids are unique', Number(c.ids) === manifest.rows, `${c.ids} distinct of ${manifest.rows}`);
const annotated = coco.images.length;
check('row count equals the images in the COCO file', Number(c.rows) === annotated, `${c.rows} vs ${annotated}`);

// One polygon, value by value: float32 of the JSON number, exactly.
const poly = coco.annotations.find((a) => !a.iscrowd && Array.isArray(a.segmentation) && a.segmentation.length > 0);
const [p] = await query(`SELECT inst.polygons AS polygons, inst.category_id AS cat, inst.bbox AS bbox
  FROM (SELECT unnest(instances) AS inst FROM read_parquet('${glob}') WHERE image_id = ${poly.image_id})
  WHERE inst.ann_id = ${poly.id}`);
check(`annotation ${poly.id} found`, p !== undefined, 'no such instance');
if (p) {
  const want = poly.segmentation.map((ring) => ring.map(Math.fround));
  const got = p.polygons.map((ring) => ring.map(Number));
  check(`annotation ${poly.id} polygons equal float32(JSON)`, JSON.stringify(got) === JSON.stringify(want),
    `got ${JSON.stringify(got).slice(0, 120)}, want ${JSON.stringify(want).slice(0, 120)}`);
  check(`annotation ${poly.id} category_id`, p.cat === poly.category_id, `${p.cat} vs ${poly.category_id}`);
  check(`annotation ${poly.id} bbox`, JSON.stringify(p.bbox.map(Number)) === JSON.stringify(poly.bbox.map(Math.fround)), `${p.bbox}`);
}

// One crowd region given as uncompressed RLE: counts exactly.
const crowd = coco.annotations.find((a) => a.iscrowd && Array.isArray(a.segmentation?.counts));
if (crowd) {
  const [r] = await query(`SELECT inst.rle.size AS size, inst.rle.counts AS counts
    FROM (SELECT unnest(instances) AS inst FROM read_parquet('${glob}') WHERE image_id = ${crowd.image_id})
    WHERE inst.ann_id = ${crowd.id}`);
  check(`crowd annotation ${crowd.id} RLE counts`, r && JSON.stringify(r.counts.map(Number)) === JSON.stringify(crowd.segmentation.counts)
    && JSON.stringify(r.size) === JSON.stringify(crowd.segmentation.size), JSON.stringify(r).slice(0, 160));
}

// The schema a SQL user sees.
const cols = (await query(`DESCRIBE SELECT * FROM read_parquet('${glob}')`)).map((r) => `${r.column_name} ${r.column_type}`);
console.log('DuckDB schema:\n  ' + cols.join('\n  '));
check('schema has the documented columns', ['image_id BIGINT', 'file_name VARCHAR', 'width INTEGER', 'height INTEGER',
  'image_format VARCHAR', 'image BLOB'].every((c) => cols.includes(c)) && cols.some((c) => c.startsWith('instances STRUCT(')), cols.join('; '));

conn.closeSync();
db.closeSync();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
