#!/usr/bin/env python3
"""Kept for properties that name this path: the sink is :mod:`kcl_mp.spark.sink`."""
from kcl_mp.spark.sink import main

if __name__ == "__main__":
    main()
