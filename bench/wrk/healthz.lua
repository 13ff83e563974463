-- wrk script for the healthz benchmark: the shared driver does the work (see common.lua)
dofile((os.getenv("BENCH_WRK_DIR") or "bench/wrk") .. "/common.lua")
