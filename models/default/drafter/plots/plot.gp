set datafile separator ','
set key autotitle columnhead
set terminal svg size 900,500
set grid
set xlabel 'step'
set output 'build/dt/plots/loss.svg'
set title 'training loss'
plot 'build/dt/train_log.csv' using 1:4 with lines title 'loss', '' using 1:5 with lines title 'CE', '' using 1:6 with lines title 'L1', '' using 1:7 with lines title 'BCE'
set output 'build/dt/plots/tau.svg'
set title 'held-out tau (analytic accepted length)'
plot 'build/dt/train_log.csv' using 1:10 with linespoints title 'tau'
set output 'build/dt/plots/acceptance.svg'
set title 'per-position acceptance a_k'
set yrange [0:1]
plot 'build/dt/train_log.csv' using 1:11 with linespoints title 'a1', 'build/dt/train_log.csv' using 1:12 with linespoints title 'a2', 'build/dt/train_log.csv' using 1:13 with linespoints title 'a3', 'build/dt/train_log.csv' using 1:14 with linespoints title 'a4', 'build/dt/train_log.csv' using 1:15 with linespoints title 'a5', 'build/dt/train_log.csv' using 1:16 with linespoints title 'a6', 'build/dt/train_log.csv' using 1:17 with linespoints title 'a7'
