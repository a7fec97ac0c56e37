"""GPU and node health: the kernel-log XID reader, NVIDIA's Xid catalog and the verdict per GPU."""
