module example.com/redisfloor

go 1.22
