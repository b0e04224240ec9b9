// cuda_fp16.h for the CPU harness: __half and its conversions are in cuda_on_cpu.h.
