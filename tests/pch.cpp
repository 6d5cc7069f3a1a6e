// Builds tests/pch.hpp's precompiled header (target attnlab_test_pch) that every test target
// reuses; this file has no code of its own.
