// 08-transformed.mlir (placeholder IR)
