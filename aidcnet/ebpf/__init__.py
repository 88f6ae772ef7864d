"""tc (clsact, direct-action) eBPF programs in C, compiled with Debian's clang, and their Python sides."""
