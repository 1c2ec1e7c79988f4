// 04-custom.mlir (placeholder IR)
