import onnxruntime as ort, numpy as np, time, statistics, sys
L=ort.GraphOptimizationLevel
levels={'disable':L.ORT_DISABLE_ALL,'basic':L.ORT_ENABLE_BASIC,'extended':L.ORT_ENABLE_EXTENDED,'all':L.ORT_ENABLE_ALL}
for model in ['resnet50','mobilenetv2']:
  for threads in [1,2]:
    sess={}
    for k,v in levels.items():
        o=ort.SessionOptions(); o.graph_optimization_level=v; o.intra_op_num_threads=threads; o.inter_op_num_threads=1; o.log_severity_level=3
        sess[k]=ort.InferenceSession(f'target/bench-models/{model}.onnx',o,providers=['CPUExecutionProvider'])
    x={sess['all'].get_inputs()[0].name: np.random.default_rng(0).standard_normal((1,3,224,224)).astype(np.float32)}
    ratios={k:[] for k in levels}
    for r in range(15):
        t={}
        for k,s in sess.items():
            s.run(None,x); a=time.perf_counter(); s.run(None,x); t[k]=time.perf_counter()-a
        for k in levels: ratios[k].append(t['disable']/t[k])
    print(model, threads, {k:round(statistics.median(v),3) for k,v in ratios.items()})
