// 07-regularized.mlir (placeholder IR)
