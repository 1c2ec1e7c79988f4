// MLIR kernel (placeholder)
