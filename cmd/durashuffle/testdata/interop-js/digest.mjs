// Reads an Arrow IPC stream with Apache Arrow's JavaScript implementation
// and prints every value of every column in a canonical JSON form that
// the Go test computes from the batches it wrote (interop_test.go,
// jsCanon): null; booleans and strings as they are; numbers as JSON
// numbers ("-0", "NaN", "Infinity", "-Infinity" as strings); 64-bit
// integers "n:<decimal>"; bytes (binary, fixed-size binary, decimals,
// intervals) "x:<hex>"; lists as arrays; structs and map entries as
// arrays of [name or key, value]. Timestamps are their stored integer,
// "n:<decimal>", not get()'s milliseconds, which drop digits.
//
// With them, the schema's metadata and each column's field metadata, as
// JSON objects. It prints {"error": ...} when the stream cannot be read,
// and a column's "error" when reading its values fails.
import { readFileSync } from 'node:fs';
import { tableFromIPC, Type } from 'apache-arrow';

function canon(v) {
  if (v === null || v === undefined) return null;
  switch (typeof v) {
    case 'bigint': return 'n:' + v.toString();
    case 'number':
      if (Object.is(v, -0)) return '-0';
      return Number.isFinite(v) ? v : String(v);
    case 'boolean':
    case 'string':
      return v;
  }
  if (ArrayBuffer.isView(v)) return 'x:' + Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('hex');
  if (typeof v[Symbol.iterator] === 'function') return Array.from(v, canon);
  return 'unknown:' + Object.prototype.toString.call(v);
}

function values(col) {
  if (col.type.typeId === Type.Timestamp) {
    const out = [];
    for (const d of col.data) {
      for (let i = 0; i < d.length; i++) out.push(d.getValid(i) ? 'n:' + d.values[i].toString() : null);
    }
    return out;
  }
  const out = [];
  for (let r = 0; r < col.length; r++) out.push(canon(col.get(r)));
  return out;
}

let table;
try {
  table = tableFromIPC(readFileSync(process.argv[2]));
} catch (e) {
  console.log(JSON.stringify({ error: String(e && e.message || e) }));
  process.exit(0);
}
const columns = table.schema.fields.map((f, i) => {
  const c = { name: f.name, type: String(f.type), metadata: Object.fromEntries(f.metadata) };
  try {
    c.values = values(table.getChildAt(i));
  } catch (e) {
    c.error = String(e && e.message || e);
  }
  return c;
});
console.log(JSON.stringify({ rows: table.numRows, metadata: Object.fromEntries(table.schema.metadata), columns }));
