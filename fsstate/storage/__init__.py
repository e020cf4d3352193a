"""The only code that touches files: FileIO (every open, list, publish and delete), run files,
manifests (and their lineage), and the block cache of decoded row groups."""
