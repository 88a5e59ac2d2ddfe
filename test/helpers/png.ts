import { inflateSync } from 'node:zlib';

/*
 * A minimal PNG decoder for screenshots (8-bit RGB or RGBA, not interlaced: what Chromium
 * writes), so a test can count the pixels a chart drew.
 */

export interface Png {
  width: number;
  height: number;
  /** RGBA, 4 bytes a pixel, row by row. */
  rgba: Buffer;
}

export function decodePng(file: Buffer): Png {
  if (!file.subarray(0, 8).equals(Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]))) throw new Error('not a PNG');
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat: Buffer[] = [];
  for (let at = 8; at < file.length;) {
    const length = file.readUInt32BE(at);
    const type = file.toString('latin1', at + 4, at + 8);
    const data = file.subarray(at + 8, at + 8 + length);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      const [depth, color, , , interlace] = [data[8], data[9], data[10], data[11], data[12]];
      if (depth !== 8 || (color !== 2 && color !== 6) || interlace !== 0) throw new Error(`unsupported PNG (depth ${depth}, colour ${color}, interlace ${interlace})`);
      channels = color === 6 ? 4 : 3;
    } else if (type === 'IDAT') {
      idat.push(data);
    }
    at += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const out = Buffer.alloc(width * height * 4);
  let prev = Buffer.alloc(stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)] as number;
    const line = Buffer.from(raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1)));
    for (let i = 0; i < stride; i++) {
      const a = i >= channels ? (line[i - channels] as number) : 0;
      const b = prev[i] as number;
      const c = i >= channels ? (prev[i - channels] as number) : 0;
      line[i] = ((line[i] as number) + predict(filter, a, b, c)) & 0xff;
    }
    for (let x = 0; x < width; x++) {
      for (let k = 0; k < 4; k++) out[(y * width + x) * 4 + k] = k < channels ? (line[x * channels + k] as number) : 255;
    }
    prev = line;
  }
  return { width, height, rgba: out };
}

function predict(filter: number, a: number, b: number, c: number): number {
  switch (filter) {
    case 0: return 0;
    case 1: return a;
    case 2: return b;
    case 3: return Math.floor((a + b) / 2);
    case 4: {
      const p = a + b - c;
      const pa = Math.abs(p - a);
      const pb = Math.abs(p - b);
      const pc = Math.abs(p - c);
      return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
    }
    default: throw new Error(`bad PNG filter ${filter}`);
  }
}

/** Pixels within `tolerance` (per channel) of the colour `[r, g, b]`. */
export function countColour(png: Png, [r, g, b]: readonly [number, number, number], tolerance = 40): number {
  let n = 0;
  for (let i = 0; i < png.rgba.length; i += 4) {
    if (Math.abs((png.rgba[i] as number) - r) <= tolerance && Math.abs((png.rgba[i + 1] as number) - g) <= tolerance && Math.abs((png.rgba[i + 2] as number) - b) <= tolerance) n++;
  }
  return n;
}
