// Builds the precompiled header (support/pch.hpp) that every test executable reuses.
