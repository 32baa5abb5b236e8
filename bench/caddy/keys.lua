-- wrk script of bench/caddy/run.sh with KEYS set: each request carries an
-- X-Bench-Key header, one of KEYS keys drawn at random, each wrk thread
-- drawing its own sequence.
local keys = tonumber(os.getenv("KEYS"))
local threads = 0

function setup(thread)
	threads = threads + 1
	thread:set("id", threads)
end

function init(args)
	math.randomseed(os.time() * 64 + id)
end

function request()
	wrk.headers["X-Bench-Key"] = tostring(math.random(keys))
	return wrk.format()
end
