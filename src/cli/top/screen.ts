/*
 * How `berth top` paints a frame in place without flicker: the cursor goes home and each line is
 * written over the last frame's, its rest erased (`EL`), then everything below the last line
 * (`ED`); the screen is never blanked between two frames. The last line ends without a newline,
 * so a frame as tall as the terminal does not scroll it.
 */

const HOME = '\x1b[H';
const CLEAR_SCREEN = '\x1b[2J';
const ERASE_LINE_END = '\x1b[K';
const ERASE_BELOW = '\x1b[J';
export const HIDE_CURSOR = '\x1b[?25l';
export const SHOW_CURSOR = '\x1b[?25h';

/** The bytes that replace what is on the screen with `frame` (the first one clears it first). */
export function paint(frame: string, first: boolean): string {
  return `${first ? `${HOME}${CLEAR_SCREEN}` : ''}${HOME}${frame.split('\n').join(`${ERASE_LINE_END}\r\n`)}${ERASE_LINE_END}${ERASE_BELOW}`;
}
