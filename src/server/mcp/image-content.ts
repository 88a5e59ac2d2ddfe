import { BerthError } from '../../errors.js';

/** Largest image `read_file` hands to the model as image content. */
export const MAX_IMAGE_BYTES = 5 * 1024 * 1024;

export type ImageMime = 'image/png' | 'image/jpeg' | 'image/gif' | 'image/webp';

/** The image type of a file by its magic bytes (never by its name), or undefined when it is none of PNG, JPEG, GIF, WebP. */
export function imageMimeOf(data: Buffer): ImageMime | undefined {
  const starts = (bytes: readonly number[], at = 0): boolean => data.length >= at + bytes.length && bytes.every((b, i) => data[at + i] === b);
  if (starts([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return 'image/png';
  if (starts([0xff, 0xd8, 0xff])) return 'image/jpeg';
  if (data.length >= 6 && (data.toString('latin1', 0, 6) === 'GIF87a' || data.toString('latin1', 0, 6) === 'GIF89a')) return 'image/gif';
  if (data.length >= 12 && data.toString('latin1', 0, 4) === 'RIFF' && data.toString('latin1', 8, 12) === 'WEBP') return 'image/webp';
  return undefined;
}

/**
 * Refuses an image too large for image content: the model could not take it whole, and base64
 * of many megabytes in one answer is a burden on every client.
 *
 * @throws BerthError (`too_large`) naming the size, the cap and what to do instead.
 */
export function assertImageFits(path: string, mime: ImageMime, bytes: number): void {
  if (bytes <= MAX_IMAGE_BYTES) return;
  throw new BerthError('too_large',
    `${path} is a ${mime} image of ${bytes} bytes, over the ${MAX_IMAGE_BYTES} bytes (5 MiB) read_file returns as an image; ` +
    'make a smaller copy in the sandbox (e.g. scale it down or convert it to JPEG) and read that, or use export_file to download it');
}
