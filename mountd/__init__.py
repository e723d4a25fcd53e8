"""agentroot ``mountd``: serve any ``vfs`` composition as a real Linux FUSE mount."""
