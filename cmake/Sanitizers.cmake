# MESHRUN_SANITIZE=ON builds everything with ASan + UBSan (preset "asan"); CI runs the daemon tests this way.
if(MESHRUN_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
