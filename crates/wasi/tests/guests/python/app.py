import sys
import os

class Run:
    def run(self) -> None:
        print("hello from python", sys.argv[1:], os.environ.get("GREETING"))
        total = sum(i * i for i in range(1000))
        print("sum of squares", total)
