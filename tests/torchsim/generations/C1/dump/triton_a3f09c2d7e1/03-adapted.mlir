// 03-adapted.mlir (placeholder IR)
