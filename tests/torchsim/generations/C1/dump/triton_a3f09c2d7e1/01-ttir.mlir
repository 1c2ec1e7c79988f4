// 01-ttir.mlir (placeholder IR)
