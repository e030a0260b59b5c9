{
  "variables": {
    "common_cflags": ["-O3", "-std=c++17", "-fno-math-errno", "-Wall", "-Wno-unused-function", "-Wno-maybe-uninitialized"]
  },
  "target_defaults": {
    "cflags!": ["-fno-exceptions", "-O2"],
    "cflags_cc!": ["-fno-exceptions", "-std=gnu++17", "-std=gnu++1y", "-std=gnu++20", "-O2"],
    "cflags_cc": ["<@(common_cflags)"],
    "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"]
  },
  "targets": [
    {
      "target_name": "maxsim_native",
      "sources": [
        "native/binding/addon.cc",
        "native/binding/cpu_binding.cc",
        "native/binding/cuda_binding.cc",
        "native/binding/cuda_train_binding.cc",
        "native/binding/cuda_chamfer_binding.cc",
        "native/binding/cuda_task.cc",
        "native/binding/cuda_handles.cc",
        "native/binding/file_binding.cc",
        "native/binding/cuda_stream_binding.cc",
        "native/cuda/stream_scan.cc",
        "native/cuda/stream_files.cc",
        "native/cuda/pinned_host.cc",
        "native/cuda/chamfer.cc",
        "native/cuda/plaid_engine.cc",
        "native/cuda/plaid_search.cc",
        "native/binding/plaid_cuda_binding.cc",
        "native/binding/plaid_cuda_index_binding.cc",
        "native/cuda/device_select.cc",
        "native/cuda/train_forward.cc",
        "native/cuda/train_backward.cc",
        "native/cuda/train_csr.cc",
        "native/cuda/train_device.cc",
        "native/cuda/train_plan.cc",
        "native/cuda/train_loss.cc",
        "native/cuda/driver.cc",
        "native/cuda/runtime.cc",
        "native/cuda/device.cc",
        "native/cuda/allocator.cc",
        "native/cuda/modules.cc",
        "native/cuda/staging.cc",
        "native/cuda/worker.cc",
        "native/cuda/engine_sets.cc",
        "native/cuda/engine_score.cc",
        "native/cuda/query_convert.cc",
        "native/cuda/engine_topk.cc",
        "native/cpu/cpu_features.cc",
        "native/cpu/engine.cc",
        "native/cpu/engine_int8.cc",
        "native/cpu/kernels_int8_portable.cc",
        "native/binding/int8_binding.cc",
        "native/cpu/thread_pool.cc",
        "native/cpu/train.cc",
        "native/binding/train_binding.cc",
        "native/cpu/chamfer.cc",
        "native/cpu/chamfer_portable.cc",
        "native/binding/chamfer_binding.cc",
        "native/cpu/residual.cc",
        "native/cpu/residual_search.cc",
        "native/cpu/residual_batch.cc",
        "native/cpu/residual_portable.cc",
        "native/binding/residual_binding.cc",
        "native/cpu/codec.cc",
        "native/binding/codec_binding.cc",
        "native/cpu/kernels_portable.cc",
        "native/cpu/kernels_neon.cc"
      ],
      "conditions": [
        ["target_arch=='x64'", { "dependencies": ["maxsim_cpu_amx", "maxsim_cpu_amx_int8", "maxsim_cpu_avx512", "maxsim_cpu_avx512bf16", "maxsim_cpu_avx2", "maxsim_cpu_int8_avx512vnni", "maxsim_cpu_int8_avxvnni", "maxsim_cpu_int8_avx2", "maxsim_cpu_residual_avxvnni"] }],
        ["target_arch!='x64'", { "sources": ["native/cpu/kernels_x86_absent.cc"] }]
      ],
      "libraries": ["-ldl", "-lpthread"]
    }
  ],
  "conditions": [
    ["target_arch=='x64'", {
      "targets": [
        {
          "target_name": "maxsim_cpu_avx512",
          "type": "static_library",
          "sources": ["native/cpu/kernels_avx512.cc", "native/cpu/chamfer_avx512.cc", "native/cpu/residual_avx512.cc"],
          "cflags_cc": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mf16c"]
        },
        {
          "target_name": "maxsim_cpu_avx512bf16",
          "type": "static_library",
          "sources": ["native/cpu/kernels_avx512bf16.cc"],
          "cflags_cc": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma", "-mf16c"]
        },
        {
          "target_name": "maxsim_cpu_amx",
          "type": "static_library",
          "sources": ["native/cpu/kernels_amx.cc"],
          "cflags_cc": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mf16c", "-mamx-tile", "-mamx-bf16"]
        },
        {
          "target_name": "maxsim_cpu_amx_int8",
          "type": "static_library",
          "sources": ["native/cpu/kernels_amx_int8.cc"],
          "cflags_cc": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mamx-tile", "-mamx-int8"]
        },
        {
          "target_name": "maxsim_cpu_avx2",
          "type": "static_library",
          "sources": ["native/cpu/kernels_avx2.cc", "native/cpu/chamfer_avx2.cc", "native/cpu/residual_avx2.cc", "native/cpu/residual_avx2int8.cc"],
          "cflags_cc": ["-mavx2", "-mfma", "-mf16c"]
        },
        {
          "target_name": "maxsim_cpu_int8_avx512vnni",
          "type": "static_library",
          "sources": ["native/cpu/kernels_int8_avx512vnni.cc", "native/cpu/residual_vnni.cc"],
          "cflags_cc": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"]
        },
        {
          "target_name": "maxsim_cpu_int8_avxvnni",
          "type": "static_library",
          "sources": ["native/cpu/kernels_int8_avxvnni.cc"],
          "cflags_cc": ["-mavx2", "<!@(sh -c \"echo 'int x;' | ${CXX:-c++} -mavxvnni -x c++ -fsyntax-only - 2>/dev/null && echo -mavxvnni || true\")"]
        },
        {
          "target_name": "maxsim_cpu_int8_avx2",
          "type": "static_library",
          "sources": ["native/cpu/kernels_int8_avx2.cc"],
          "cflags_cc": ["-mavx2"]
        },
        {
          "target_name": "maxsim_cpu_residual_avxvnni",
          "type": "static_library",
          "sources": ["native/cpu/residual_avxvnni.cc"],
          "cflags_cc": ["-mavx2", "-mfma", "<!@(sh -c \"echo 'int x;' | ${CXX:-c++} -mavxvnni -x c++ -fsyntax-only - 2>/dev/null && echo -mavxvnni || true\")"]
        }
      ]
    }]
  ]
}
