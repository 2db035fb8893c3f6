// Test data.

/** ~400 KiB of CSV, in pieces of varied size, some strings, some bytes. */
export function csvPieces(rows = 8_000) {
  const pieces = ["id,party,amount,description\n"];
  for (let i = 0; i < rows; i += 1) {
    const row = `inv-${String(i).padStart(6, "0")},Party ${i % 97},${(i * 37) % 100000}.${String(i % 100).padStart(2, "0")},"a row ""quoted"" ünïcødé ${"x".repeat(i % 23)}"\n`;
    pieces.push(i % 2 === 0 ? row : new TextEncoder().encode(row));
  }
  return pieces;
}

export function concat(pieces) {
  return Buffer.concat(pieces.map((p) => (typeof p === "string" ? Buffer.from(p, "utf8") : Buffer.from(p))));
}
