"""The HTTP surface: reads only the snapshot store, never the collectors."""
