namespace kvwb::ui { int placeholder() { return 0; } }
