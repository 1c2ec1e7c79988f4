# spec of pytorchsim_triton_compiler_fused_add_0: written by PyTorchSim's kernel_spec.write_spec_file (content not reproduced)
