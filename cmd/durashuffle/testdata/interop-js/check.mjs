// Reads an Arrow IPC stream with Apache Arrow's JavaScript implementation
// and prints what a test compares against arrow-go's reading of the same
// bytes: row count, column names and types, and a digest per column.
import { readFileSync } from 'node:fs';
import { tableFromIPC } from 'apache-arrow';

const table = tableFromIPC(readFileSync(process.argv[2]));
const columns = table.schema.fields.map((f, i) => {
  const col = table.getChildAt(i);
  let nulls = 0;
  let digest = '';
  for (let r = 0; r < table.numRows; r++) {
    const v = col.get(r);
    if (v === null || v === undefined) { nulls++; continue; }
    if (r < 3) digest += String(v) + '|';
  }
  return { name: f.name, type: String(f.type), nulls, first: digest };
});
console.log(JSON.stringify({ rows: table.numRows, columns }));
