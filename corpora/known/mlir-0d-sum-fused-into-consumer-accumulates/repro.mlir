#scalar = affine_map<() -> ()>
#to_scalar = affine_map<(d0) -> ()>
#identity = affine_map<(d0) -> (d0)>
// torch.sum(x).repeat(2) of a 0-d x, as torch-mlir lowers it: a loop-less sum into a zero-filled
// init, then a broadcast. Expected [-1, -1] for x = -1.
func.func @sum_then_broadcast(%x: tensor<f32>) -> tensor<2xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %empty = tensor.empty() : tensor<f32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<f32>) -> tensor<f32>
  %sum = linalg.generic {indexing_maps = [#scalar, #scalar], iterator_types = []} ins(%x : tensor<f32>) outs(%init : tensor<f32>) {
  ^bb0(%in: f32, %acc: f32):
    %add = arith.addf %in, %acc : f32
    linalg.yield %add : f32
  } -> tensor<f32>
  %empty2 = tensor.empty() : tensor<2xf32>
  %out = linalg.generic {indexing_maps = [#to_scalar, #identity], iterator_types = ["parallel"]} ins(%sum : tensor<f32>) outs(%empty2 : tensor<2xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<2xf32>
  return %out : tensor<2xf32>
}

func.func @main() {
  %x = arith.constant dense<-1.0> : tensor<f32>
  %r = call @sum_then_broadcast(%x) : (tensor<f32>) -> tensor<2xf32>
  %m = bufferization.to_memref %r : memref<2xf32>
  %u = memref.cast %m : memref<2xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}
