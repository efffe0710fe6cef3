"""Benchmarks: workloads, peers, reports."""
