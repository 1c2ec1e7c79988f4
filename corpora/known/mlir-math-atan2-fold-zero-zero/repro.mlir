// atan2(+0, +0) is +0 (C and IEEE 754); canonicalize folds it to NaN.
func.func @atan2_of_zeros() -> f32 {
  %zero = arith.constant 0.000000e+00 : f32
  %r = math.atan2 %zero, %zero : f32
  return %r : f32
}
