import { TEST_IMAGE } from '../helpers/docker.js';

/** On a registry host of the reserved `.invalid` TLD: it can never be pulled, on any cluster. */
export const MISSING_IMAGE = 'berth-test-no-such-registry.invalid/none:missing';

/**
 * The stand-in's image mapping for test clusters: every image runs as the test image, except
 * one on a `.invalid` registry, which fails to start as it would fail to pull.
 */
export function standinImageFor(image: string): string {
  return /^[^/]+\.invalid\//.test(image) ? 'berth-no-such-image:none' : TEST_IMAGE;
}
