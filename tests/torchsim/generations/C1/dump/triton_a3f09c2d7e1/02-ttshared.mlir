// 02-ttshared.mlir (placeholder IR)
