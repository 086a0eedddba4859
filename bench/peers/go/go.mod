module weir.bench/peers/go

go 1.19
