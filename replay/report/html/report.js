(function(){
  var root=document.documentElement;
  var boxes=document.querySelectorAll('input.only-failing-toggle');
  Array.prototype.forEach.call(boxes,function(box){
    box.parentNode.hidden=false;
    var target=document.getElementById(box.getAttribute('data-target'));
    box.addEventListener('change',function(){
      if(target){target.classList.toggle('only-failing',box.checked);}
    });
  });
  var failing=Array.prototype.slice.call(document.querySelectorAll('section.req'));
  var at=-1;
  document.addEventListener('keydown',function(e){
    if(!failing.length||e.ctrlKey||e.metaKey||e.altKey){return;}
    if(e.key==='n'){at=Math.min(at+1,failing.length-1);}
    else if(e.key==='p'){at=Math.max(at-1,0);}
    else{return;}
    failing[at].scrollIntoView({block:'start'});
  });
  var hint=document.getElementById('keys-hint');
  if(hint&&failing.length){hint.hidden=false;}
  root.setAttribute('data-js','ready');
})();
