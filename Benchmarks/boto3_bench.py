#!/usr/bin/env python3
"""boto3 against the canned Cognito endpoint, for Benchmarks/compare.sh.

usage: boto3_bench.py --endpoint URL --federations N --concurrency C

One client shared by all threads (boto3 clients are thread-safe); unsigned calls.
Each federation is get_id, then get_credentials_for_identity with the returned ID.
The last line printed is federations per second.
"""
import argparse
import concurrent.futures
import time

import boto3
from botocore import UNSIGNED
from botocore.config import Config

POOL_ID = "us-east-1:00000000-0000-4000-8000-000000000000"
TOKEN = "EAAGm0PX4ZCpsBAKZCZBbench0token0opaque0value0ZD"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--federations", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()

    client = boto3.client(
        "cognito-identity",
        endpoint_url=args.endpoint,
        region_name="us-east-1",
        config=Config(signature_version=UNSIGNED, max_pool_connections=64),
    )
    logins = {"graph.facebook.com": TOKEN}

    def federate(_):
        identity = client.get_id(IdentityPoolId=POOL_ID, Logins=logins)["IdentityId"]
        credentials = client.get_credentials_for_identity(IdentityId=identity, Logins=logins)
        assert credentials["Credentials"]["AccessKeyId"]

    def run(count):
        if args.concurrency <= 1:
            for i in range(count):
                federate(i)
        else:
            with concurrent.futures.ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                for _ in pool.map(federate, range(count)):
                    pass

    run(args.warmup)
    start = time.perf_counter()
    run(args.federations)
    elapsed = time.perf_counter() - start
    print(f"{args.federations} federations at concurrency {args.concurrency} in {elapsed:.3f} s")
    print(f"{args.federations / elapsed:.1f}")


if __name__ == "__main__":
    main()
