"""Continuous operation (issue 33): retention policy, goodput, capacity and change reports."""
