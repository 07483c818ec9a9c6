// placeholder until src/queue lands
