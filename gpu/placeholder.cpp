namespace kvwb::gpu { int placeholder() { return 0; } }
