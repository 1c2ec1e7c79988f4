// 09-custom.mlir (placeholder IR)
